"""The ingestion worker batches chunks across jobs, fails a bad file alone, and puts interactive work first.

The model is the real one; the wrapper (kb_bridge/testing/recording_embedder.py) only records what each
model call received and can hold the first call until the test has queued its jobs, so that the queue is
full when the worker looks at it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import flask
import pytest

from kb_bridge.local_engine.app import engine_of
from kb_bridge.local_engine.embedding.embedder import Embedder
from kb_bridge.local_engine.ingest import worker

from kb_bridge.testing.engine_app import API, upload, wait_for, wait_job
from kb_bridge.testing.recording_embedder import RecordingEmbedder

# The engine API suite: every test here runs once per store (tests/engine/conftest.py).
pytestmark = pytest.mark.both_stores


@pytest.fixture
def recorder(model: Embedder) -> RecordingEmbedder:
    return RecordingEmbedder(model)


@pytest.fixture
def gated_app(make_app: Callable[..., flask.Flask], recorder: RecordingEmbedder) -> flask.Flask:
    return make_app(model=recorder, embed_batch_size=4)


def _queue_files(client: Any, count: int, start: int = 0, priority: str | None = "bulk") -> list[int]:
    ids = []
    for i in range(start, start + count):
        fields = {"title": f"file{i:03d}"} | ({"priority": priority} if priority else {})
        response = upload(client, f"f{i}.txt", f"Report {i} about the migration of wetland bird {i}.".encode(),
                          **fields)
        assert response.status_code == 202, response.json
        ids.append(response.json["id"])
    return ids


def test_one_model_call_embeds_chunks_of_several_jobs_and_a_bad_file_fails_alone(
    gated_app: flask.Flask, recorder: RecordingEmbedder
) -> None:
    client = gated_app.test_client()
    first = _queue_files(client, 1)
    assert recorder.first_call.wait(60)  # the worker holds the first job's call at the gate
    job_ids = first + _queue_files(client, 6, start=1)
    broken = upload(client, "broken.pdf", b"%PDF-1.4 this is not really a PDF", priority="bulk")
    assert broken.status_code == 202
    job_ids += _queue_files(client, 6, start=7)
    # Released only once a call's worth of files is prepared: the files thread reads each in a child process,
    # and released at once the model could outrun it and take them one by one (as it did on a loaded machine).
    wait_for(lambda: engine_of(gated_app).worker.chunks_ahead() >= 4, "four files prepared ahead of the model")
    recorder.gate.set()
    jobs = [wait_job(client, job_id) for job_id in job_ids]
    failed = wait_job(client, broken.json["id"])
    assert failed["status"] == "failed" and "pdf" in failed["error"].lower()
    assert all(job["status"] == "done" for job in jobs), jobs
    # After the first (gated) call, calls hold up to 4 chunks from different jobs (each file is one chunk).
    titles_per_call = [{text.split("\n", 1)[0] for text in call} for call in recorder.calls]
    assert max(len(titles) for titles in titles_per_call) == 4, titles_per_call
    assert sum(len(call) for call in recorder.calls) == len(job_ids)  # every chunk embedded once
    for i in range(13):
        hits = client.post(f"{API}/search", json={"query": f"wetland bird {i}", "mode": "fts", "top_n": 1}).json
        assert hits["results"][0]["title"] == f"file{i:03d}"
    status = client.get(f"{API}/status").json
    assert status["vectors"] == status["chunks"] == 13


def test_a_note_goes_before_the_bulk_queue(gated_app: flask.Flask, recorder: RecordingEmbedder) -> None:
    client = gated_app.test_client()
    bulk = _queue_files(client, 1)
    assert recorder.first_call.wait(60)
    bulk += _queue_files(client, 80, start=1)
    note = client.post(f"{API}/jobs", json={"text": "The heron count moved to Thursday."})
    assert note.status_code == 202 and note.json["priority"] == "interactive"
    recorder.gate.set()
    done_note = wait_job(client, note.json["id"])
    assert done_note["status"] == "done"
    queue_then = client.get(f"{API}/status").json["queue"]
    # Documents get ids in the order they are stored: most of the bulk load was stored after the note.
    wait_for(lambda: client.get(f"{API}/status").json["queue"]["done"] == len(bulk) + 1, "the bulk load")
    later = [job for job in (wait_job(client, i) for i in bulk) if job["document_id"] > done_note["document_id"]]
    assert len(later) >= 50, (len(later), queue_then)


def test_priority_is_by_size_unless_asked(client: Any) -> None:
    small = client.post(f"{API}/jobs", json={"text": "short"}).json
    large = client.post(f"{API}/jobs", json={"text": "x " * (200 * 1024)}).json
    asked = client.post(f"{API}/jobs", json={"text": "short", "priority": "bulk"}).json
    assert (small["priority"], large["priority"], asked["priority"]) == ("interactive", "bulk", "bulk")
    file_job = upload(client, "a.txt", b"small file").json
    assert file_job["priority"] == "interactive"
    wrong = client.post(f"{API}/jobs", json={"text": "short", "priority": "urgent"})
    assert wrong.status_code == 422 and "priority" in wrong.json["error"]["message"]
    wrong_form = upload(client, "b.txt", b"data", priority="now")
    assert wrong_form.status_code == 422 and "priority" in wrong_form.json["error"]["message"]


class TransactionRecorder:
    """The store's `complete_jobs`, unchanged, with a record of the job ids each transaction wrote."""

    def __init__(self, complete_jobs: Callable[..., Any]) -> None:
        self._complete_jobs = complete_jobs
        self.groups: list[list[int]] = []

    def __call__(self, finished: Sequence[Any], now: str) -> Any:
        self.groups.append([job.job_id for job in finished])
        return self._complete_jobs(finished, now)


def _record_transactions(app: flask.Flask, monkeypatch: pytest.MonkeyPatch) -> TransactionRecorder:
    store = engine_of(app).store
    recorder = TransactionRecorder(store.complete_jobs)
    monkeypatch.setattr(store, "complete_jobs", recorder)
    return recorder


def test_bulk_jobs_finished_close_together_are_written_in_one_transaction(
    gated_app: flask.Flask, recorder: RecordingEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Far longer than the model needs for these 3 calls of tiny texts (about 0.1 s), so that the test does not
    # depend on speed; every run also sits through it once, as nothing interactive ends it.
    monkeypatch.setattr(worker, "GROUP_WAIT_SECONDS", 5.0)
    transactions = _record_transactions(gated_app, monkeypatch)
    client = gated_app.test_client()
    job_ids = _queue_files(client, 1)
    assert recorder.first_call.wait(60)
    job_ids += _queue_files(client, 11, start=1)
    recorder.gate.set()
    jobs = [wait_job(client, job_id) for job_id in job_ids]
    assert all(job["status"] == "done" for job in jobs), jobs
    assert len(recorder.calls) >= 3  # batch 4: the 12 jobs finished over at least 3 model calls...
    assert sorted(job for group in transactions.groups for job in group) == sorted(job_ids)
    assert len(transactions.groups) < len(recorder.calls), transactions.groups  # ...and were written in fewer


def test_an_interactive_job_ends_the_wait_of_finished_bulk_work(
    gated_app: flask.Flask, recorder: RecordingEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker, "GROUP_WAIT_SECONDS", 600.0)
    transactions = _record_transactions(gated_app, monkeypatch)
    client = gated_app.test_client()
    bulk = _queue_files(client, 1)
    assert recorder.first_call.wait(60)
    recorder.gate.set()
    wait_for(lambda: recorder.returned == 1, "the bulk job's model call")
    note = client.post(f"{API}/jobs", json={"text": "The heron count moved to Thursday."})
    assert note.status_code == 202 and note.json["priority"] == "interactive"
    # Done long before the 600 s wait: the note is written at once, and the waiting bulk job with it.
    assert wait_job(client, note.json["id"])["status"] == "done"
    assert wait_job(client, bulk[0])["status"] == "done"
    assert transactions.groups == [[bulk[0], note.json["id"]]]
