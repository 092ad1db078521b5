"""`kb-bridge ingest` when the engine answers an upload with an earlier attempt's job (its Idempotency-Key
replays a job for 24 h): content that returns to an earlier version, a pruned file restored, a job cancelled
while the run waits. A real CLI process against a real local engine (full-text only: nothing here needs the
model).

Each test loads into a collection of its own and keeps its state file in its own temporary folder.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import flask
import pytest
import requests

from kb_bridge.cli.ingest_files import resolve_roots
from kb_bridge.testing.held_engine import HeldEngine
from kb_bridge.testing.processes import REPO, Service, clean_env, start_engine, wait_until

KEY = "ingest-attempts-key-0123456789abcdef"
DEADLINE = 60  # seconds: a run that outlives it is stuck, not slow


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("ingest-attempts-engine")
    service = start_engine(tmp, tmp / "data", env={"KB_API_KEY": KEY, "KB_ENGINE_EMBEDDER": "none"})
    yield service
    service.stop()


def ingest_argv(tmp: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "kb_bridge", "ingest", *args, "--state", str(tmp / "state.json"), "--json"]


def ingest_json(url: str, tmp: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = subprocess.run(ingest_argv(tmp, *args), env=_env(url), cwd=REPO, capture_output=True, text=True,
                            timeout=DEADLINE)
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout)


def _env(url: str) -> dict[str, str]:
    return clean_env({"KB_ENGINE_URL": url, "KB_API_KEY": KEY, "KB_ENGINE_RETRIES": "2"})


def api(url: str, method: str, path: str, **options: Any) -> Any:
    response = requests.request(method, f"{url}/api/v1{path}", headers={"Authorization": f"Bearer {KEY}"},
                                timeout=30, **options)
    response.raise_for_status()
    return response.json()


def documents(url: str, collection: str) -> list[dict[str, Any]]:
    return list(api(url, "GET", "/documents", params={"tag": f"collection:{collection}", "limit": 500})["documents"])


def fts(url: str, query: str, collection: str) -> list[dict[str, Any]]:
    return list(api(url, "POST", "/search", json={"query": query, "mode": "fts",
                                                    "tags": [f"collection:{collection}"]})["results"])


def test_content_back_to_an_earlier_version_is_stored_again(engine: Service, tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    first = "The avocet sweeps its upturned bill through the shallows."
    (folder / "bird.md").write_text(first)
    assert ingest_json(engine.url, tmp_path, str(folder), "--collection", "aba")[1]["added"] == 1
    (folder / "bird.md").write_text("The bittern booms from the reed bed.")
    assert ingest_json(engine.url, tmp_path, str(folder), "--collection", "aba")[1]["updated"] == 1

    (folder / "bird.md").write_text(first)  # back to the first version (git stash; git stash pop)
    code, report = ingest_json(engine.url, tmp_path, str(folder), "--collection", "aba")
    assert code == 0 and report["updated"] == 1, report
    stored = documents(engine.url, "aba")
    assert [(doc["source_path"], doc["sha256"]) for doc in stored] == \
        [("notes/bird.md", hashlib.sha256(first.encode()).hexdigest())], stored
    assert "avocet" in api(engine.url, "GET", f"/documents/{stored[0]['id']}")["content"]
    assert [hit["document_id"] for hit in fts(engine.url, "avocet", "aba")] == [stored[0]["id"]]
    assert not fts(engine.url, "bittern", "aba")

    code, report = ingest_json(engine.url, tmp_path, str(folder), "--collection", "aba")
    assert code == 0 and report["skipped"] == 1, report
    assert [doc["id"] for doc in documents(engine.url, "aba")] == [stored[0]["id"]]


def test_a_pruned_file_restored_is_stored_again(engine: Service, tmp_path: Path) -> None:
    folder = tmp_path / "field"
    folder.mkdir()
    text = "The wryneck turns its head like a snake."
    (folder / "wryneck.md").write_text(text)
    (folder / "other.md").write_text("The hoopoe raises its crest.")
    assert ingest_json(engine.url, tmp_path, str(folder), "--collection", "restored")[1]["added"] == 2

    (folder / "wryneck.md").unlink()
    code, report = ingest_json(engine.url, tmp_path, str(folder), "--collection", "restored", "--prune")
    assert code == 0 and report["removed"] == 1, report
    (folder / "wryneck.md").write_text(text)  # restored, the same bytes
    code, report = ingest_json(engine.url, tmp_path, str(folder), "--collection", "restored", "--prune")
    assert code == 0 and report["added"] == 1, report
    stored = {doc["source_path"]: doc for doc in documents(engine.url, "restored")}
    assert set(stored) == {"field/wryneck.md", "field/other.md"}, stored
    assert "wryneck" in api(engine.url, "GET", f"/documents/{stored['field/wryneck.md']['id']}")["content"]
    assert fts(engine.url, "wryneck", "restored")


@pytest.fixture
def held(tmp_path: Path) -> Iterator[HeldEngine]:
    engine = HeldEngine(tmp_path / "held-data", KEY)
    yield engine
    engine.stop()


def test_a_job_cancelled_while_the_run_waits_is_reported_and_a_rerun_stores_the_file(held: HeldEngine,
                                                                                       tmp_path: Path) -> None:
    folder = tmp_path / "queue"
    folder.mkdir()
    (folder / "kept.md").write_text("The dotterel rests on the high fell.")
    (folder / "cancelled.md").write_text("The shorelark winters on the coast.")
    gate = held.hold()  # no job leaves the queue: the run uploads both files, then waits
    process = subprocess.Popen(ingest_argv(tmp_path, str(folder), "--collection", "cancels"), env=_env(held.url),
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def queued() -> dict[str, int]:
            jobs = api(held.url, "GET", "/jobs", params={"status": "queued"})["jobs"]
            return {job["filename"]: job["id"] for job in jobs}

        wait_until(lambda: set(queued()) == {"kept.md", "cancelled.md"}, DEADLINE, what="both uploads queued")
        assert api(held.url, "DELETE", f"/jobs/{queued()['cancelled.md']}")["status"] == "cancelled"
        gate.set()
        out, err = process.communicate(timeout=DEADLINE)  # polling a cancelled job for ever never gets here
    finally:
        gate.set()
        if process.poll() is None:
            process.kill()
            process.communicate()
    report = json.loads(out)
    assert process.returncode == 1 and (report["added"], report["cancelled"]) == (1, 1), (report, err)
    assert report["cancellations"] == ["queue/cancelled.md"], report
    assert [doc["source_path"] for doc in documents(held.url, "cancels")] == ["queue/kept.md"]

    code, report = ingest_json(held.url, tmp_path, str(folder), "--collection", "cancels")
    assert code == 0 and (report["added"], report["skipped"], report["cancelled"]) == (1, 1, 0), report
    assert {doc["source_path"] for doc in documents(held.url, "cancels")} == {"queue/kept.md", "queue/cancelled.md"}
    assert fts(held.url, "shorelark", "cancels")


def test_a_run_an_older_kb_bridge_left_queued_is_continued_not_queued_twice(held: HeldEngine,
                                                                           tmp_path: Path) -> None:
    """kb-bridges before 2026-11-27 sent an upload's Idempotency-Key without the tags: the source_path and the
    content's SHA-256 only. A run one of them left with files still queued (Ctrl-C, or the engine stopped for
    the upgrade) is continued by the current one, which gets those jobs back, rather than queueing each such
    file a second time (two documents at one source_path). Built here as that run left it: the file's job,
    queued under the old key with the body the old run sent (the same fields as now)."""
    folder = tmp_path / "handbook"
    folder.mkdir()
    content = b"The ring ouzel nests on the crag above the tarn."
    (folder / "ouzel.md").write_bytes(content)
    source_path, tag = "handbook/ouzel.md", resolve_roots([folder])[0].tag
    old_key = "kb-ingest-" + hashlib.sha256(f"{source_path}\n{hashlib.sha256(content).hexdigest()}".encode()).hexdigest()
    answers: list[int] = []

    @held.app.after_request
    def count(response: flask.Response) -> flask.Response:
        if flask.request.method == "POST" and flask.request.path == "/api/v1/jobs":
            answers.append(response.status_code)
        return response

    gate = held.hold()
    try:
        old = requests.post(f"{held.url}/api/v1/jobs", headers={"Authorization": f"Bearer {KEY}", "Idempotency-Key": old_key},
                            data=[("title", "ouzel.md"), ("source_path", source_path), ("priority", "bulk"),
                                  ("tags", "collection:upgraded"), ("tags", tag)],
                            files={"file": ("ouzel.md", content)}, timeout=30)
        assert old.status_code == 202, old.text
        process = subprocess.Popen(ingest_argv(tmp_path, str(folder), "--collection", "upgraded"), env=_env(held.url),
                                   cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: len(answers) >= 2 or process.poll() is not None, DEADLINE, what="the run's upload")
        gate.set()
        out, err = process.communicate(timeout=DEADLINE)
    finally:
        gate.set()
    report = json.loads(out)
    assert process.returncode == 0 and report["added"] == 1, (report, err)
    assert answers == [202, 200]  # the run's upload got the old run's job back
    assert [doc["source_path"] for doc in documents(held.url, "upgraded")] == [source_path]


def test_a_failed_file_is_tried_again_by_the_next_run(engine: Service, tmp_path: Path) -> None:
    """A file whose job failed is uploaded again by the next run (its cause may have passed: an engine short of
    memory, a parser fixed), not answered with the failed job for the Idempotency-Key's 24 hours."""
    folder = tmp_path / "papers"
    folder.mkdir()
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 not really a pdf")

    def jobs_of_the_file() -> list[int]:
        jobs = api(engine.url, "GET", "/jobs", params={"status": "failed", "limit": 100})["jobs"]
        return sorted(job["id"] for job in jobs if job.get("filename") == "broken.pdf")

    for attempt in (1, 2):
        code, report = ingest_json(engine.url, tmp_path, str(folder), "--collection", "retries")
        assert code == 1 and report["failures"][0]["source_path"] == "papers/broken.pdf", report
        assert len(jobs_of_the_file()) == attempt  # a new job each run: the file was sent again
