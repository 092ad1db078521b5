"""Export, then import into an empty engine, with the real CLI (`python -m kb_bridge export|import`) and the
real local engine, on SQLite and on PostgreSQL: the copy has the same number of documents with the same
titles, tags, collections, source paths, texts, original bytes and times, though many of them share a text
(import once merged such documents: 629 exported, 626 imported)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from kb_bridge.testing.postgres import PostgresServer
from kb_bridge.testing.processes import REPO, Service, clean_env, start_engine, wait_until
from kb_bridge.testing.processes import ENGINE_KEY

HEADERS = {"Authorization": f"Bearer {ENGINE_KEY}"}
TEXT = "The user prefers short answers with bullet points."
PAGE = b"<html><body><h1>Shared page</h1><p>Kept byte for byte.</p></body></html>"


def kb(engine: Service, *args: str) -> subprocess.CompletedProcess[str]:
    env = clean_env({"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY})
    return subprocess.run([sys.executable, "-m", "kb_bridge", *args], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=300)


def api(engine: Service, path: str, **params: Any) -> Any:
    response = requests.get(f"{engine.url}/api/v1{path}", params=params, headers=HEADERS, timeout=30)
    response.raise_for_status()
    return response.json()


def queue(engine: Service, **request: Any) -> int:
    response = requests.post(f"{engine.url}/api/v1/jobs", headers=HEADERS, timeout=30, **request)
    assert response.status_code == 202, response.text
    return int(response.json()["id"])


@pytest.fixture(params=["sqlite", "postgresql"])
def engines(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Service, Service]]:
    """Two empty engines (no model: the round trip is about what is stored) on the same kind of store."""
    server = PostgresServer().start() if request.param == "postgresql" else None
    started: list[Service] = []
    try:
        for name in ("source", "target"):
            env = {"KB_API_KEY": ENGINE_KEY, "KB_ENGINE_EMBEDDER": "none"}
            if server is not None:
                env["KB_ENGINE_DATABASE_URL"] = server.new_database()
            started.append(start_engine(tmp_path, tmp_path / name, env))
        yield started[0], started[1]
    finally:
        for service in started:
            service.stop()
        if server is not None:
            server.stop()


def fill(engine: Service) -> None:
    """Documents that share a text, a title, bytes or a source path, but are each distinct; some placed in
    time (created_at/updated_at, engine 3.8), the rest made now."""
    memory, documents = ["collection:memory"], ["collection:documents"]
    jobs = [
        queue(engine, json={"text": TEXT, "title": "preferences", "tags": [*memory, "user"],
                            "created_at": "2021-01-01T08:00:00Z", "updated_at": "2022-02-02T09:00:00Z"}),
        queue(engine, json={"text": TEXT, "title": "habits", "tags": memory, "created_at": "2021-03-01T00:00:00Z"}),
        queue(engine, json={"text": TEXT, "title": "preferences", "tags": documents}),
        queue(engine, json={"text": TEXT, "title": "a", "tags": memory, "source_path": "notes/a.md"}),
        queue(engine, json={"text": TEXT, "title": "a", "tags": memory, "source_path": "notes/b.md"}),
        queue(engine, json={"text": TEXT, "title": "preferences", "tags": memory}),  # the first one, made again
        queue(engine, files={"file": ("one.html", PAGE)}, data={"tags": json.dumps(documents),
              "source_path": "pages/one.html", "created_at": "2020-05-05T05:05:05.5Z"}),
        queue(engine, files={"file": ("two.html", PAGE)}, data={"tags": json.dumps(documents),
              "source_path": "pages/two.html"}),
    ]
    for job in jobs:
        wait_until(lambda job=job: api(engine, f"/jobs/{job}")["status"] == "done", 60, what=f"job {job}")


def stored(engine: Service) -> list[tuple[Any, ...]]:
    """Every document as a comparable tuple, sorted: what must survive the round trip."""
    rows = []
    for listed in api(engine, "/documents", limit=500)["documents"]:
        document = api(engine, f"/documents/{listed['id']}")
        original = requests.get(f"{engine.url}/api/v1/documents/{listed['id']}/original", headers=HEADERS, timeout=30)
        original.raise_for_status()
        rows.append((document["title"], tuple(sorted(document["tags"])), document["source_path"], document["doc_type"],
                     document["content"], hashlib.sha256(original.content).hexdigest(), document["created_at"],
                     document["updated_at"]))
    return sorted(rows)


def test_export_then_import_into_an_empty_engine_gives_back_every_document(engines: tuple[Service, Service],
                                                                          tmp_path: Path) -> None:
    source, target = engines
    fill(source)
    before = stored(source)
    assert len(before) == 8 and sum(1 for row in before if row[4] == TEXT) == 6

    export_file = tmp_path / "kb.jsonl"
    exported = kb(source, "export", str(export_file))
    assert exported.returncode == 0, exported.stderr
    assert len(export_file.read_text().splitlines()) == 8
    imported = kb(target, "import", str(export_file), "--json")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout) == {"added": 8, "skipped": 0, "failed": []}
    assert "cannot keep" not in imported.stderr

    after = stored(target)
    assert after == before  # titles, tags and collections, paths, types, texts, original bytes, both times
    assert ("preferences", ("collection:memory", "user"), None, "note", TEXT, hashlib.sha256(TEXT.encode()).hexdigest(),
            "2021-01-01T08:00:00.000Z", "2022-02-02T09:00:00.000Z") in after

    again = kb(target, "import", str(export_file), "--json")
    assert json.loads(again.stdout) == {"added": 0, "skipped": 8, "failed": []}
    assert stored(target) == before
