"""The local engine under attack from a web page and from hostile input, as a real process on loopback
(`kb-bridge engine`, keyless, as a developer runs it on a laptop): DNS rebinding (a foreign Host), cross-site
requests (a foreign or null Origin, JSON sent as text/plain or as a form) are refused before anything is
stored, changed or deleted; a 32 MB text without one break point is ingested while /healthz keeps answering."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from kb_bridge.testing.postgres import PostgresServer
from kb_bridge.testing.processes import Service, start_engine, wait_until


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("hardened-engine")
    service = start_engine(tmp, tmp / "data", env={"KB_ENGINE_EMBEDDER": "none", "KB_ENGINE_ALLOWED_HOSTS": "engine"})
    yield service
    service.stop()


def total(engine: Service) -> int:
    return int(requests.get(engine.url + "/api/v1/documents", timeout=10).json()["total"])


def add_note(engine: Service, text: str) -> int:
    job = requests.post(engine.url + "/api/v1/jobs", json={"text": text}, timeout=10).json()
    wait_until(lambda: requests.get(f"{engine.url}/api/v1/jobs/{job['id']}", timeout=10).json()["status"] == "done", 30,
               what="the note")
    return int(requests.get(f"{engine.url}/api/v1/jobs/{job['id']}", timeout=10).json()["document_id"])


def post_raw(engine: Service, path: str, body: bytes, headers: dict[str, str]) -> requests.Response:
    return requests.post(engine.url + path, data=body, headers=headers, timeout=10)


@pytest.mark.parametrize("host", ["evil.example", "attacker.example:8000", "127.0.0.1.nip.io", "localhost.evil.example"])
def test_a_foreign_host_is_refused_and_nothing_is_stored(engine: Service, host: str) -> None:
    before = total(engine)
    answer = post_raw(engine, "/api/v1/jobs", b'{"text": "planted by a rebinding page"}',
                      {"Host": host, "Content-Type": "application/json"})
    assert answer.status_code == 421 and answer.json()["error"]["code"] == "misdirected_request"
    assert requests.get(engine.url + "/api/v1/status", headers={"Host": host}, timeout=10).status_code == 421
    assert total(engine) == before


def test_loopback_names_and_the_configured_hosts_are_answered(engine: Service) -> None:
    port = engine.url.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"engine:{port}", "engine"):
        assert requests.get(engine.url + "/api/v1/status", headers={"Host": host}, timeout=10).status_code == 200, host
    assert requests.get(engine.url + "/healthz", headers={"Host": "probe.internal"}, timeout=10).status_code == 200


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://localhost:1", "http://127.0.0.1.evil.example"])
def test_a_cross_site_origin_is_refused_and_nothing_changes(engine: Service, origin: str) -> None:
    doc_id = add_note(engine, "a note a web page would like gone")
    before = total(engine)
    write = post_raw(engine, "/api/v1/jobs", b'{"text": "planted cross-site"}',
                     {"Origin": origin, "Content-Type": "application/json"})
    delete = requests.delete(f"{engine.url}/api/v1/documents/{doc_id}", headers={"Origin": origin}, timeout=10)
    assert write.status_code == 403 and delete.status_code == 403 and write.json()["error"]["code"] == "forbidden"
    assert total(engine) == before and requests.get(f"{engine.url}/api/v1/documents/{doc_id}", timeout=10).status_code == 200


def test_the_engines_own_origin_and_no_origin_work(engine: Service) -> None:
    for headers in ({}, {"Origin": engine.url}):
        assert requests.get(engine.url + "/api/v1/status", headers=headers, timeout=10).status_code == 200


@pytest.mark.parametrize("content_type", ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                                          "", "application/jsonx"])
def test_json_endpoints_take_only_application_json(engine: Service, content_type: str) -> None:
    doc_id = add_note(engine, "a note whose tags a form would change")
    before = total(engine)
    headers = {"Content-Type": content_type} if content_type else {}
    bodies: list[tuple[str, bytes]] = [
        ("/api/v1/jobs", b'{"text": "smuggled as text"}'),
        ("/api/v1/search", b'{"query": "note"}'),
        (f"/api/v1/documents/{doc_id}/tags", b'{"tags": ["smuggled"]}'),
    ]
    for path, body in bodies:
        answer = post_raw(engine, path, body, headers)
        assert answer.status_code == 415 and answer.json()["error"]["code"] == "unsupported_media_type", (path, answer.text)
    patched = requests.patch(f"{engine.url}/api/v1/notes/{doc_id}", data=b'{"text": "overwritten"}', headers=headers, timeout=10)
    assert patched.status_code == 415
    assert total(engine) == before
    assert requests.get(f"{engine.url}/api/v1/documents/{doc_id}", timeout=10).json()["tags"] == []


def test_json_with_a_charset_and_multipart_uploads_still_work(engine: Service) -> None:
    answer = post_raw(engine, "/api/v1/search", b'{"query": "note"}', {"Content-Type": "application/json; charset=utf-8"})
    assert answer.status_code == 200
    upload = requests.post(engine.url + "/api/v1/jobs", files={"file": ("a.txt", b"uploaded as a file")}, timeout=10)
    assert upload.status_code == 202


def test_a_32_mb_text_without_break_points_is_ingested_while_healthz_answers(engine: Service) -> None:
    slowest: list[float] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            started = time.monotonic()
            requests.get(engine.url + "/healthz", timeout=30).raise_for_status()
            slowest.append(time.monotonic() - started)
            stop.wait(0.2)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        job: dict[str, Any] = requests.post(engine.url + "/api/v1/jobs", files={"file": ("flat.txt", b"z" * (32 * 1024 * 1024))},
                                            timeout=120).json()
        wait_until(lambda: requests.get(f"{engine.url}/api/v1/jobs/{job['id']}", timeout=30).json()["status"] in ("done", "failed"),
                   120, interval=0.2, what="the 32 MB job")
    finally:
        stop.set()
        poller.join(30)
    finished = requests.get(f"{engine.url}/api/v1/jobs/{job['id']}", timeout=10).json()
    assert finished["status"] == "done", finished
    document = requests.get(f"{engine.url}/api/v1/documents/{finished['document_id']}", timeout=60).json()
    assert document["chunk_count"] == 32 * 1024 * 1024 // 1000 + 1
    assert slowest and max(slowest) < 2.0, max(slowest)


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_nul_characters_follow_one_rule_on_both_stores(tmp_path: Path, request: pytest.FixtureRequest,
                                                       store: str) -> None:
    """U+0000, which PostgreSQL text cannot hold: a note or field holding it is refused naming the field on
    either store (it used to be taken on SQLite and an internal error on PostgreSQL); a file's text loses it."""
    env = {"KB_ENGINE_EMBEDDER": "none"}
    if store == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        env["KB_ENGINE_DATABASE_URL"] = server.new_database()
    engine = start_engine(tmp_path, tmp_path / "data", env=env)
    try:
        for body, field in (({"text": "godwits\x00probe"}, "text"), ({"text": "ok", "title": "\x00"}, "title"),
                            ({"text": "ok", "source_path": "a\x00b"}, "source_path")):
            answer = requests.post(engine.url + "/api/v1/jobs", json=body, timeout=10)
            assert answer.status_code == 422, answer.text
            assert answer.json()["error"]["code"] == "validation_error"
            assert answer.json()["error"]["message"].startswith(field) and "U+0000" in answer.json()["error"]["message"]
        answer = requests.get(engine.url + "/api/v1/documents", params={"source_path": "a\x00"}, timeout=10)
        assert answer.status_code == 422 and answer.json()["error"]["message"].startswith("source_path")
        job = requests.post(engine.url + "/api/v1/jobs", files={"file": ("dump.txt", b"godwits\x00 probe\x00 mud")},
                            timeout=10).json()
        wait_until(lambda: requests.get(f"{engine.url}/api/v1/jobs/{job['id']}", timeout=10).json()["status"]
                   in ("done", "failed"), 60, what="the file's job")
        finished = requests.get(f"{engine.url}/api/v1/jobs/{job['id']}", timeout=10).json()
        assert finished["status"] == "done", finished
        document = requests.get(f"{engine.url}/api/v1/documents/{finished['document_id']}", timeout=10).json()
        assert document["content"] == "godwits probe mud"
        assert requests.get(engine.url + "/api/v1/documents", timeout=10).json()["total"] == 1
    finally:
        engine.stop()
