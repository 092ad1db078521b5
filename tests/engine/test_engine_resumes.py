"""A job is blamed for an engine stop only when the stop came while it was being worked on (prepared, in a
model window, or waiting to be stored), not while it only waited for the model, claimed ahead (store/base.py
MAX_RESUMES, ingest/worker.py). Real processes, killed with SIGKILL while the model holds a chosen job: the
model waits at a gate (kb_bridge/testing/gated_engine.py), so which jobs are in the window at each kill is
decided, not raced."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kb_bridge.local_engine.clock import now_iso
from kb_bridge.local_engine.ingest import scheduling
from kb_bridge.local_engine.ingest.worker import _Ahead, _transactions, _Work
from kb_bridge.local_engine.store.base import MAX_RESUMES, ClaimedJob, Submission
from kb_bridge.local_engine.store.postgres import PostgresStore
from kb_bridge.testing.engine_app import wait_for
from kb_bridge.testing.postgres import PostgresServer
from kb_bridge.testing.processes import free_port

pytestmark = pytest.mark.both_stores

API = "/api/v1"
DEADLINE_SECONDS = 60.0
MARKER = "poisonmarker"
# Over one window of the gated model (32 calls of one chunk): the window at each start is this job's alone.
POISON_CHUNKS = 40


class GatedEngine:
    """One start of the gated engine on `data`; the gate is closed (the model holds its first call)."""

    def __init__(self, data: Path, database_url: str | None, start: int) -> None:
        self.port = free_port()
        self.gate = data.parent / "gate"
        self.gate.touch()
        self.calls = data.parent / f"calls-{start}"
        self.log = data.parent / f"engine-{start}.log"
        args = [sys.executable, "-m", "kb_bridge.testing.gated_engine", str(data), str(self.port), str(self.gate),
                str(self.calls), *([database_url] if database_url else [])]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(self._ready, "the gated engine to serve", DEADLINE_SECONDS)

    def _ready(self) -> bool:
        assert self.process.poll() is None, f"the engine exited:\n{self.log.read_text()}"
        try:
            return self.request("GET", "/healthz")[0] == 200
        except OSError:
            return False

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def post_note(self, text: str, title: str) -> int:
        status, job = self.request("POST", f"{API}/jobs", {"text": text, "title": title, "priority": "bulk"})
        assert status == 202, job
        return int(job["id"])

    def job(self, job_id: int) -> dict[str, Any]:
        status, job = self.request("GET", f"{API}/jobs/{job_id}")
        assert status == 200, job
        return dict(job)

    def in_model(self) -> str:
        """The texts of the model call in progress ('' before the first)."""
        lines = self.calls.read_text(encoding="utf-8").splitlines() if self.calls.exists() else []
        return lines[-1] if lines else ""

    def wait_in_model(self, marker: str) -> None:
        wait_for(lambda: marker in self.in_model(), f"a job titled {marker} in the model")

    def wait_prepared(self, job_ids: list[int]) -> None:
        """Until these jobs are prepared (their progress shows): waiting for the model, claimed ahead."""
        wait_for(lambda: all(self.job(job_id).get("progress") for job_id in job_ids), f"jobs {job_ids} prepared")

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(DEADLINE_SECONDS)


@pytest.fixture
def engines(tmp_path: Path, database_url: str | None) -> Iterator[list[GatedEngine]]:
    """Starts of one engine on one data directory (and database); whichever still runs is killed at the end."""
    started: list[GatedEngine] = []
    (tmp_path / "data").mkdir()
    yield started
    for engine in started:
        if engine.process.poll() is None:
            engine.kill()


def start(engines: list[GatedEngine], tmp_path: Path, database_url: str | None) -> GatedEngine:
    engine = GatedEngine(tmp_path / "data", database_url, len(engines))
    engines.append(engine)
    return engine


def poison_text() -> str:
    return "\n\n".join(f"part {i} " + "lorem ipsum dolor sit amet " * 35 for i in range(POISON_CHUNKS))


def test_jobs_only_claimed_ahead_at_each_kill_are_never_failed(engines: list[GatedEngine], tmp_path: Path,
                                                              database_url: str | None) -> None:
    engine = start(engines, tmp_path, database_url)
    poison = engine.post_note(poison_text(), MARKER)
    engine.wait_in_model(MARKER)
    waiting = [engine.post_note(f"note {i} waiting for the model", f"waiting {i}") for i in range(4)]
    for kill in range(MAX_RESUMES + 1):
        if kill:
            engine = start(engines, tmp_path, database_url)
            engine.wait_in_model(MARKER)
        engine.wait_prepared(waiting)  # claimed ahead of the model at the kill: not to blame
        engine.kill()
    engine = start(engines, tmp_path, database_url)
    engine.gate.unlink()
    finished = [wait_for(lambda job_id=job_id: engine.job(job_id)["status"] in ("done", "failed") and engine.job(job_id),
                         f"job {job_id} to end") for job_id in waiting]
    assert [(job["status"], job["error"]) for job in finished] == [("done", None)] * len(waiting)
    assert engine.job(poison)["status"] == "failed"  # in the model at every kill (the test below)


def test_a_job_in_the_model_at_every_kill_fails_after_max_resumes(engines: list[GatedEngine], tmp_path: Path,
                                                                 database_url: str | None) -> None:
    engine = start(engines, tmp_path, database_url)
    poison = engine.post_note(poison_text(), MARKER)
    behind = engine.post_note("a note behind it", "behind")
    for kill in range(MAX_RESUMES + 1):
        if kill:
            engine = start(engines, tmp_path, database_url)
            assert engine.job(poison)["status"] in ("queued", "running"), f"failed after {kill} kill(s)"
        engine.wait_in_model(MARKER)
        engine.kill()
    engine = start(engines, tmp_path, database_url)
    failed = engine.job(poison)
    assert failed["status"] == "failed" and failed["finished_at"]
    assert failed["error"].startswith(f"the engine stopped while running this job {MAX_RESUMES + 1} times")
    engine.gate.unlink()
    assert wait_for(lambda: engine.job(behind)["status"] == "done", "the note behind it")
    assert MARKER not in engine.calls.read_text(encoding="utf-8"), "the failed job ran again"


def test_a_takeover_counts_a_resume_only_for_a_job_its_replica_was_working_on(tmp_path: Path,
                                                                              postgres_server: PostgresServer) -> None:
    """A replica gone (its leases ran out) while it worked on one job and held another ahead of its model: the
    replica taking them over blames the first alone, and fails it after MAX_RESUMES."""
    (tmp_path / "uploads").mkdir()
    store = PostgresStore(postgres_server.new_database(), tmp_path, tmp_path / "uploads")
    store.open()
    try:
        worked, _ = store.submit(Submission("note", {"text": "ends its replica"}), None, now_iso())
        waiting, _ = store.submit(Submission("note", {"text": "waits for the model"}), None, now_iso())
        for _ in range(MAX_RESUMES + 1):
            claimed = {job.id for job in (store.claim_job(now_iso()), store.claim_job(now_iso())) if job is not None}
            assert claimed == {worked["id"], waiting["id"]}
            store.set_working([worked["id"]], True)  # in a model window
            with store.db.write() as conn:  # as another replica's leases, run out: it is gone
                conn.execute("UPDATE jobs SET lease_owner = 'gone', lease_expires = now() - interval '1 second' "
                             "WHERE status = 'running'")
        taken = store.claim_job(now_iso())
        assert taken is not None and taken.id == waiting["id"]
        failed = store.get_job(worked["id"])
        assert failed["status"] == "failed"
        assert str(failed["error"]).startswith(f"the engine stopped while running this job {MAX_RESUMES + 1} times")
        assert store.claim_job(now_iso()) is None
    finally:
        store.close()


def _prepared(job_id: int, lane: int, resumes: int = 0, chunks: int = 2) -> _Work:
    job = ClaimedJob(id=job_id, type="note", filename=None, payload={}, staged_path=None, priority=lane,
                     resumes=resumes)
    work = _Work(job, texts=["text"] * chunks, missing=list(range(chunks)))
    work.left = chunks
    return work


def test_a_job_blamed_for_a_stop_before_is_embedded_in_a_window_of_its_own() -> None:
    """Jobs that shared a window with the job that stops the engine are blamed with it, and would share its
    window again after the restart (claims go oldest first): blamed once, each goes alone, so a job that
    does not stop the engine is done, and the one that does is blamed alone."""
    ahead = _Ahead()
    for work in (_prepared(1, scheduling.BULK), _prepared(2, scheduling.BULK, resumes=1),
                 _prepared(3, scheduling.BULK), _prepared(4, scheduling.PROMPT, resumes=2),
                 _prepared(5, scheduling.PROMPT)):
        ahead.put(work)
    assert ahead.take(512, 0, prompt_only=True) == []  # not between the calls of another job's window
    windows = []
    while taken := ahead.take(512, 0):
        windows.append(sorted({work.job.id for work, _ in taken}))
    assert windows == [[4], [1, 5], [2], [3]]


def test_a_job_blamed_for_a_stop_before_is_stored_in_a_transaction_of_its_own() -> None:
    group = [_prepared(1, scheduling.PROMPT, resumes=1), _prepared(2, scheduling.PROMPT),
             _prepared(3, scheduling.BULK, resumes=3), _prepared(4, scheduling.BULK)]
    assert [[work.job.id for work in transaction] for transaction in _transactions(group)] == [[2, 4], [1], [3]]
