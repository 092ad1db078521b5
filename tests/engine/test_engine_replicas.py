"""Engine replicas on one PostgreSQL database, as real processes (`kb-bridge engine --database-url`):
a shared queue where every job is done once, a replica killed or frozen mid-job, a concurrent first start,
read-your-writes across replicas, and what happens when the URL is wrong or the database goes away.

Each replica has its own data directory, as on separate machines. The database is a real PostgreSQL 18 with
pgvector (kb_bridge/testing/postgres.py). Replicas run full-text only unless a test needs vectors.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests

from kb_bridge.local_engine.store.postgres.schema import LATEST_VERSION
from kb_bridge.testing.postgres import PostgresServer
from kb_bridge.testing.processes import Service, clean_env, free_port, start_engine, wait_until

API = "/api/v1"
FTS_ONLY = {"KB_ENGINE_EMBEDDER": "none"}


@pytest.fixture
def replicas(tmp_path: Path, postgres_server: PostgresServer) -> Iterator[Any]:
    """start(n, env) -> n engines on one fresh database; all stopped at teardown."""
    url = postgres_server.new_database()
    started: list[Service] = []

    def start(name: str, env: dict[str, str] | None = None) -> Service:
        service = start_engine(tmp_path, tmp_path / name, {"KB_ENGINE_DATABASE_URL": url, **(env or FTS_ONLY)})
        started.append(service)
        return service

    start.url = url  # type: ignore[attr-defined]
    yield start
    for service in started:
        freeze(service, False)
        service.stop()


def freeze(engine: Service, frozen: bool) -> None:
    """SIGSTOP (or SIGCONT) the whole replica: gunicorn's master and its worker."""
    if engine.process.poll() is None:
        os.killpg(engine.process.pid, signal.SIGSTOP if frozen else signal.SIGCONT)


def add_note(engine: Service, text: str) -> dict[str, Any]:
    response = requests.post(f"{engine.url}{API}/jobs", json={"type": "note", "text": text}, timeout=30)
    assert response.status_code == 202, response.text
    return dict(response.json())


def job(engine: Service, job_id: int) -> dict[str, Any]:
    return dict(requests.get(f"{engine.url}{API}/jobs/{job_id}", timeout=30).json())


def wait_done(engine: Service, job_id: int, timeout: float = 60) -> dict[str, Any]:
    wait_until(lambda: job(engine, job_id)["status"] in ("done", "failed"), timeout, 0.1, f"job {job_id}")
    return job(engine, job_id)


def jobs_done_by(engine: Service) -> set[int]:
    return {int(m) for m in re.findall(r"job (\d+) done", engine.log())}


def test_jobs_spread_over_two_replicas_are_each_done_once(replicas: Any) -> None:
    a, b = replicas("a"), replicas("b")
    submitted = [add_note(a if i % 2 else b, f"shared queue note number {i} about cormorants")["id"]
                 for i in range(40)]
    assert len(set(submitted)) == 40  # ids unique across replicas
    finished = [wait_done(a if i % 3 else b, job_id) for i, job_id in enumerate(submitted)]  # any replica answers
    assert {j["status"] for j in finished} == {"done"}
    documents = [j["document_id"] for j in finished]
    assert len(set(documents)) == 40
    for doc_id in documents:
        assert requests.get(f"{b.url}{API}/documents/{doc_id}", timeout=30).json()["version"] == 1
    wait_until(lambda: jobs_done_by(a) | jobs_done_by(b) == set(submitted), 10, 0.1, "the log lines")
    by_a, by_b = jobs_done_by(a), jobs_done_by(b)
    assert by_a and by_b and not by_a & by_b and by_a | by_b == set(submitted)
    assert requests.get(f"{a.url}{API}/status", timeout=30).json()["documents"]["total"] == 40


def _slow_job(engine: Service, tmp_path: Path) -> int:
    """A file whose embedding takes a while: a replica with the model is still running it seconds later."""
    text = "\n\n".join(f"Paragraph {i}: herons wade in the shallow water of estuary {i} at dawn, "
                       "watching for fish among the reeds while the tide turns." * 6 for i in range(900))
    response = requests.post(f"{engine.url}{API}/jobs", files={"file": ("long.txt", text.encode(), "text/plain")},
                             data={"priority": "bulk"}, timeout=60)
    assert response.status_code == 202, response.text
    job_id = int(response.json()["id"])
    wait_until(lambda: job(engine, job_id)["status"] == "running", 60, 0.1, "the job to start")
    return job_id


def _assert_one_whole_document(engine: Service, url: str, done: dict[str, Any]) -> None:
    assert done["status"] == "done", done
    with psycopg.connect(url) as conn:
        documents = conn.execute("SELECT id, version FROM documents").fetchall()
        indexes = [r[0] for r in conn.execute(
            "SELECT chunk_index FROM chunks WHERE document_id = %s ORDER BY chunk_index", (done["document_id"],))]
    assert documents == [(done["document_id"], 1)]
    assert indexes == list(range(len(indexes))) and len(indexes) > 100


def test_a_replica_killed_mid_job_loses_nothing(replicas: Any, tmp_path: Path) -> None:
    a = replicas("a", {"KB_ENGINE_EMBEDDER": "minilm", "KB_ENGINE_WAIT_FOR_MODEL": "1"})
    job_id = _slow_job(a, tmp_path)
    b = replicas("b")  # after a has taken the job
    os.killpg(a.process.pid, signal.SIGKILL)
    a.process.wait(10)
    killed_at = time.monotonic()
    done = wait_done(b, job_id, timeout=120)  # the lease (30 s) runs out, then b takes it over
    assert time.monotonic() - killed_at < 30 + 60
    wait_until(lambda: job_id in jobs_done_by(b), 10, 0.1, "b's log line")
    _assert_one_whole_document(b, replicas.url, done)


def test_a_frozen_replica_stops_nobody_and_its_job_is_done_once(replicas: Any, tmp_path: Path) -> None:
    a = replicas("a", {"KB_ENGINE_EMBEDDER": "minilm", "KB_ENGINE_WAIT_FOR_MODEL": "1"})
    job_id = _slow_job(a, tmp_path)
    b = replicas("b")  # after a has taken the job
    freeze(a, True)
    try:
        started = time.monotonic()
        note = add_note(b, "a note while another replica is frozen")
        assert wait_done(b, note["id"], timeout=20)["status"] == "done"
        assert time.monotonic() - started < 20
        done = wait_done(b, job_id, timeout=120)
    finally:
        freeze(a, False)
    wait_until(lambda: job_id in jobs_done_by(b), 10, 0.1, "b's log line")
    # a wakes up holding a job it no longer owns: it must not store it a second time
    wait_until(lambda: "taken over" in a.log(), 120, 0.5, "the thawed replica to notice")
    with psycopg.connect(replicas.url) as conn:
        assert conn.execute("SELECT COUNT(*) FROM documents WHERE doc_type <> 'note'").fetchone() == (1,)
    assert done["status"] == "done"
    # nor keep its copy of the file, which b ran from its own (it stayed until a restarted, 600 MiB at most each)
    wait_until(lambda: "results here are dropped" in a.log(), 120, 0.5, "the thawed replica to drop its result")
    wait_until(lambda: not [p for p in (tmp_path / "a" / "uploads").iterdir() if p.is_file()], 10, 0.1,
               "the thawed replica's copy of the file to go")


def test_two_replicas_started_together_on_an_empty_database_both_come_up(tmp_path: Path,
                                                                         postgres_server: PostgresServer) -> None:
    url = postgres_server.new_database()
    services = []
    for name in ("a", "b", "c"):
        port = free_port()
        argv = [sys.executable, "-m", "kb_bridge", "engine", "--data", str(tmp_path / name),
                "--bind", f"127.0.0.1:{port}", "--database-url", url]
        services.append(Service(name, argv, clean_env(FTS_ONLY), tmp_path / f"{name}.log", f"http://127.0.0.1:{port}"))
    try:
        for service in services:
            service.wait_ready(timeout=120)
            assert requests.get(f"{service.url}{API}/status", timeout=30).json()["store"] == "postgresql"
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT version FROM kb_schema").fetchall() == [(LATEST_VERSION,)]
    finally:
        for service in services:
            service.stop()


def test_read_your_writes_across_replicas(replicas: Any) -> None:
    env = {"KB_ENGINE_EMBEDDER": "minilm", "KB_ENGINE_WAIT_FOR_MODEL": "1"}
    a, b = replicas("a", env), replicas("b", env)
    note = add_note(a, "Kingfishers nest in burrows dug into sandy river banks")
    done = wait_done(a, note["id"])
    assert job(b, note["id"])["status"] == "done"
    assert requests.get(f"{b.url}{API}/documents/{done['document_id']}", timeout=30).status_code == 200
    for mode, query in (("fts", "kingfishers burrows"), ("vector", "where do kingfishers breed"),
                        ("hybrid", "kingfisher nests")):
        results = requests.post(f"{b.url}{API}/search", json={"query": query, "mode": mode}, timeout=30).json()
        assert [r["document_id"] for r in results["results"]][:1] == [done["document_id"]], (mode, results)


def _engine_exit(tmp_path: Path, url: str, timeout: float = 90) -> tuple[int, str, float]:
    argv = [sys.executable, "-m", "kb_bridge", "engine", "--data", str(tmp_path / "d"),
            "--bind", f"127.0.0.1:{free_port()}", "--database-url", url]
    started = time.monotonic()
    done = subprocess.run(argv, env=clean_env(FTS_ONLY), capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stderr, time.monotonic() - started


def test_a_bad_or_unreachable_database_stops_the_engine_naming_it_never_the_password(tmp_path: Path) -> None:
    code, err, _ = _engine_exit(tmp_path, "mysql://user:hunter2pw@127.0.0.1/kb")
    assert code == 2 and "KB_ENGINE_DATABASE_URL" in err and "hunter2pw" not in err
    code, err, seconds = _engine_exit(tmp_path, f"postgresql://kb:hunter2pw@127.0.0.1:{free_port()}/kb")
    assert code != 0 and seconds < 90 and "PostgreSQL is unavailable" in err and "hunter2pw" not in err
    assert not (tmp_path / "d" / "engine.sqlite3").exists()  # never a silent fall back to SQLite


def test_the_start_log_and_status_name_the_store_never_the_password(tmp_path: Path,
                                                                    postgres_server: PostgresServer) -> None:
    # The test server trusts local connections, so a URL with a password connects and the password is only
    # there to be kept out of the log.
    url = postgres_server.new_database().replace("postgresql://postgres@", "postgresql://postgres:hunter2pw@")
    engine = start_engine(tmp_path, tmp_path / "pg", {"KB_ENGINE_DATABASE_URL": url, **FTS_ONLY})
    local = start_engine(tmp_path, tmp_path / "local", FTS_ONLY)
    try:
        assert requests.get(f"{engine.url}{API}/status", timeout=30).json()["store"] == "postgresql"
        assert requests.get(f"{local.url}{API}/status", timeout=30).json()["store"] == "sqlite"
        wait_until(lambda: "store: postgresql at postgresql://postgres:***@" in engine.log(), 30, what="the log line")
        assert "hunter2pw" not in engine.log()
        wait_until(lambda: "store: sqlite at " in local.log(), 30, what="the log line")
    finally:
        engine.stop()
        local.stop()


def test_a_newer_schema_is_refused(tmp_path: Path, postgres_server: PostgresServer) -> None:
    url = postgres_server.new_database()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kb_schema (one INTEGER PRIMARY KEY, version INTEGER NOT NULL)")
        conn.execute("INSERT INTO kb_schema VALUES (1, 99)")
    code, err, _ = _engine_exit(tmp_path, url)
    assert code == 2 and "schema version 99" in err and "newer" in err


def test_a_database_without_pgvector_that_the_user_cannot_create_stops_the_engine(
        tmp_path: Path, postgres_server: PostgresServer) -> None:
    url = postgres_server.new_database()
    name = url.rsplit("/", 1)[1].split("?")[0]
    postgres_server.admin("DO $$ BEGIN CREATE ROLE kb_limited LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    postgres_server.admin(f'REVOKE CREATE ON DATABASE "{name}" FROM PUBLIC')
    code, err, _ = _engine_exit(tmp_path, url.replace("postgresql://postgres@", "postgresql://kb_limited@"))
    assert code == 2 and "pgvector" in err, err


def test_the_database_going_away_is_a_prompt_503_and_the_engine_recovers_by_itself(tmp_path: Path) -> None:
    server = PostgresServer().start()
    try:
        url = server.new_database()
        engine = start_engine(tmp_path, tmp_path / "a", {"KB_ENGINE_DATABASE_URL": url, **FTS_ONLY})
        try:
            wait_done(engine, add_note(engine, "written before the outage")["id"])
            server.pause()
            started = time.monotonic()
            response = requests.get(f"{engine.url}{API}/documents", timeout=30)
            assert time.monotonic() - started < 15
            assert response.status_code == 503 and "PostgreSQL" in response.json()["error"]["message"]
            server.resume()
            wait_until(lambda: requests.get(f"{engine.url}{API}/documents", timeout=30).status_code == 200, 60, 0.5,
                       "the engine to serve again")
            note = add_note(engine, "written after the outage")
            assert wait_done(engine, note["id"])["status"] == "done"
            assert requests.get(f"{engine.url}{API}/documents", timeout=30).json()["total"] == 2
            engine.signal(signal.SIGTERM)
            engine.process.wait(30)  # SIGTERM stops a replica within 30 s
        finally:
            engine.stop()
    finally:
        server.stop()
