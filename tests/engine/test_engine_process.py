"""The engine as a real process: gunicorn on a free 127.0.0.1 port, signals, and a kill mid-ingestion."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kb_bridge.local_engine.embedding.embedder import bundled_model_dir
from kb_bridge.local_engine.store.sqlite.schema import LATEST_VERSION

from kb_bridge.testing.engine_app import wait_for

STARTUP_SECONDS = 90.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EngineProcess:
    """`python -m kb_bridge.local_engine` in its own process group, with its log in a file."""

    def __init__(self, data_dir: Path, log_path: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.key = env.get("KB_API_KEY")
        full_env = {**os.environ, **env}
        if self.key is None:
            full_env.pop("KB_API_KEY", None)  # the developer's own key must not leak into the test
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kb_bridge.local_engine", "--data", str(data_dir),
                 "--bind", f"127.0.0.1:{self.port}"],
                env=full_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                auth: bool = True) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        if auth and self.key:
            all_headers["Authorization"] = f"Bearer {self.key}"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=all_headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def wait_ready(self) -> None:
        def ready() -> bool:
            assert self.process.poll() is None, f"engine exited early:\n{self.log()}"
            try:
                return self.request("GET", "/healthz", auth=False)[0] == 200
            except OSError:
                return False

        wait_for(ready, "the engine to serve /healthz", STARTUP_SECONDS)

    def kill(self) -> None:
        """SIGKILL the whole group (master and worker), as a crash or power cut would, and wait until
        every process of it is gone: the worker, not our child, may outlive the master by a moment and
        still hold the data directory's lock."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(30)
        wait_for(lambda: not _group_alive(self.process.pid), "the killed engine's processes to exit", 30)

    def stop(self) -> int:
        """SIGTERM, and wait for a clean exit."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.kill()
            raise


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[list[EngineProcess]]:
    """Started engines are appended here; any still running at teardown are killed."""
    started: list[EngineProcess] = []
    yield started
    for engine in started:
        engine.kill()


def start(engines: list[EngineProcess], data_dir: Path, log_path: Path, **env: str) -> EngineProcess:
    engine = EngineProcess(data_dir, log_path, env)
    engines.append(engine)
    engine.wait_ready()
    return engine


def test_served_engine_speaks_the_api_and_stops_cleanly(engines: list[EngineProcess], tmp_path: Path) -> None:
    engine = start(engines, tmp_path / "data", tmp_path / "engine.log", KB_API_KEY="process-key",
                   KB_ENGINE_EMBEDDER="none", KB_ENGINE_MAX_UPLOAD_BYTES="100000")
    assert "kb engine ready at http://127.0.0.1:" in engine.log()
    assert engine.request("GET", "/api/v1/status", auth=False)[0] == 401
    status = engine.request("GET", "/api/v1/status")[1]
    assert status["search_modes"] == ["fts"] and status["model"] is None
    code, job = engine.request("POST", "/api/v1/jobs", {"text": "ibis", "tags": ["a/b", "collection:memory"]})
    assert code == 202
    done = wait_for(lambda: (j := engine.request("GET", f"/api/v1/jobs/{job['id']}")[1])["status"] == "done" and j,
                    "the note job")
    doc_id = done["document_id"]
    code, tags = engine.request("DELETE", f"/api/v1/documents/{doc_id}/tags/a%2Fb")
    assert code == 200 and tags["tags"] == ["collection:memory"]
    code, tags = engine.request("DELETE", f"/api/v1/documents/{doc_id}/tags/collection%3Amemory")
    assert code == 200 and tags["tags"] == []
    # A Content-Length over the limit is refused before the body is read.
    conn = http.client.HTTPConnection("127.0.0.1", engine.port, timeout=30)
    conn.putrequest("POST", "/api/v1/jobs")
    conn.putheader("Authorization", "Bearer process-key")
    conn.putheader("Content-Type", "multipart/form-data; boundary=xyz")
    conn.putheader("Content-Length", str(50 * 1024 * 1024))
    conn.endheaders()
    response = conn.getresponse()
    assert response.status == 413
    assert json.loads(response.read())["error"]["code"] == "payload_too_large"
    conn.close()
    assert engine.stop() == 0
    assert "kb engine stopped" in engine.log()


def test_a_second_engine_on_the_same_data_dir_is_refused(engines: list[EngineProcess], tmp_path: Path) -> None:
    start(engines, tmp_path / "data", tmp_path / "one.log", KB_ENGINE_EMBEDDER="none")
    second = EngineProcess(tmp_path / "data", tmp_path / "two.log", {"KB_ENGINE_EMBEDDER": "none"})
    engines.append(second)
    assert second.process.wait(60) == 2
    assert "in use by another engine" in second.log()


def refused_at_start(engines: list[EngineProcess], data_dir: Path, log_path: Path) -> str:
    """Start an engine on `data_dir` that must stop in the foreground: exit 2, one line, no worker's traceback and
    no gunicorn "Worker failed to boot" (exit 3). Its log."""
    refused = EngineProcess(data_dir, log_path, {"KB_ENGINE_EMBEDDER": "none"})
    engines.append(refused)
    assert refused.process.wait(60) == 2
    log = refused.log()
    assert "Traceback" not in log and "Worker failed to boot" not in log, log
    return log


def test_a_database_from_a_newer_engine_stops_the_engine_in_one_line(engines: list[EngineProcess],
                                                                     tmp_path: Path) -> None:
    """A team that rolls back to an older kb-bridge after an upgrade has a database at a schema this engine
    does not know: it stops in the foreground with exit 2 and one line, as on PostgreSQL, not a worker's
    traceback and gunicorn's "Worker failed to boot" (exit 3)."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    with sqlite3.connect(data / "engine.sqlite3") as conn:
        conn.execute(f"PRAGMA user_version = {LATEST_VERSION + 1}")
    log = refused_at_start(engines, data, tmp_path / "newer.log")
    assert f"schema version {LATEST_VERSION + 1}, newer than this engine knows" in log, log


@contextlib.contextmanager
def _unwritable(path: Path) -> Iterator[None]:
    """`path` made unwritable for this process: read-only for a user, immutable (chattr +i) for root, whom
    permissions do not stop; skipped where neither can be done (a file system without the attribute)."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(0o600)
        return
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_database_it_cannot_write_stops_the_engine_in_one_line(engines: list[EngineProcess],
                                                                  tmp_path: Path) -> None:
    """SQLite opens a database file it may not write read-only without a word, so the engine would serve
    until its first write failed in gunicorn's worker (the worker's start already writes: a traceback and
    "Worker failed to boot"). It stops in the foreground instead, exit 2, one line naming the file."""
    data = tmp_path / "data"
    assert start(engines, data, tmp_path / "first.log", KB_ENGINE_EMBEDDER="none").stop() == 0
    database = data / "engine.sqlite3"
    with _unwritable(database):
        log = refused_at_start(engines, data, tmp_path / "refused.log")
    assert f"the database {database} cannot be written" in log, log
    # Writable again, the same data directory serves.
    start(engines, data, tmp_path / "again.log", KB_ENGINE_EMBEDDER="none")


def test_a_data_directory_that_is_a_file_stops_the_engine_in_one_line(engines: list[EngineProcess],
                                                                      tmp_path: Path) -> None:
    not_a_directory = tmp_path / "data"
    not_a_directory.write_text("a file where the data directory should be", encoding="utf-8")
    log = refused_at_start(engines, not_a_directory, tmp_path / "refused.log")
    assert f"the data directory {not_a_directory} is a file, not a directory" in log, log


@pytest.mark.skipif(bundled_model_dir() is None, reason="needs the embedding model (kb-bridge[engine])")
def test_killed_mid_ingestion_every_job_finishes_exactly_once(engines: list[EngineProcess], tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = {"KB_ENGINE_EMBEDDER": "minilm", "KB_ENGINE_EMBED_BATCH": "4"}
    engine = start(engines, data_dir, tmp_path / "first.log", **env)
    count = 24
    job_ids = []
    for i in range(count):
        paragraphs = [f"Note {i}, paragraph {p}: observations of bird number {i * 100 + p} near the lake, "
                      f"with weather, time of day and behaviour recorded in detail for later study." for p in range(24)]
        code, job = engine.request("POST", "/api/v1/jobs", {"text": "\n\n".join(paragraphs), "source_path": f"n/{i}"})
        assert code == 202
        job_ids.append(job["id"])

    def some_done_some_not() -> bool:
        queue = engine.request("GET", "/api/v1/status")[1]["queue"]
        return queue["done"] >= 2 and queue["running"] >= 1

    wait_for(some_done_some_not, "ingestion to be under way", STARTUP_SECONDS)
    engine.kill()
    engine = start(engines, data_dir, tmp_path / "second.log", **env)
    assert re.search(r"resuming [1-9]\d* job\(s\)", engine.log())

    def all_finished() -> dict[str, int] | None:
        queue = engine.request("GET", "/api/v1/status")[1]["queue"]
        return queue if queue["queued"] == queue["running"] == 0 else None

    queue = wait_for(all_finished, "every job to finish after the restart", 180)
    assert queue == {"queued": 0, "running": 0, "done": count, "failed": 0, "cancelled": 0}
    jobs = [engine.request("GET", f"/api/v1/jobs/{job_id}")[1] for job_id in job_ids]
    document_ids = [job["document_id"] for job in jobs]
    assert len(set(document_ids)) == count  # one document per job, none shared
    listing = engine.request("GET", "/api/v1/documents?limit=500")[1]
    assert listing["total"] == count  # and no stray second document from a re-run
    by_id = {document["id"]: document for document in listing["documents"]}
    for i, job in enumerate(jobs):
        assert by_id[job["document_id"]]["source_path"] == f"n/{i}"
    status = engine.request("GET", "/api/v1/status")[1]
    assert status["vectors"] == status["chunks"]  # every chunk embedded exactly once
    assert status["indexes"]["text"]["chunks"] == status["chunks"]  # and in the full-text index once
    assert engine.stop() == 0
