"""The queue is fair without declarations (ingest/scheduling.py): a note posted behind a flood of small files
sent without `priority` is stored before most of them, a declared bulk load keeps its share through the
flood, and every queued job completes. Counted by the order documents are stored in (their ids), not timed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flask
import pytest

from kb_bridge.local_engine.app import engine_of
from kb_bridge.local_engine.embedding.embedder import Embedder
from kb_bridge.local_engine.ingest.scheduling import Submitters
from kb_bridge.testing.engine_app import API, upload, wait_for, wait_job
from kb_bridge.testing.recording_embedder import RecordingEmbedder

pytestmark = pytest.mark.both_stores

FLOOD = 100
BULK = 5


@pytest.fixture
def recorder(model: Embedder) -> RecordingEmbedder:
    return RecordingEmbedder(model)


@pytest.fixture
def gated_app(make_app: Callable[..., flask.Flask], recorder: RecordingEmbedder) -> flask.Flask:
    # One chunk per model call: windows of 32 chunks, so that the flood is several windows deep.
    app = make_app(model=recorder, embed_batch_size=1)
    # A stopped clock: every upload after the first comes "at once", as a flood's do. On the wall clock a stall
    # of QUIET_SECONDS between two posts on a loaded machine made a flood file look single (prompt work), and
    # the count below then depended on the load; the quiet spell itself is tested in test_engine_scheduling.py.
    engine_of(app).intake._submitters = Submitters(clock=lambda: 0.0)
    return app


def _post_file(client: Any, number: int, **fields: str) -> int:
    text = f"Survey {number} counted the wetland birds of marsh {number}.".encode()
    response = upload(client, f"survey{number}.txt", text, title=f"survey{number}", **fields)
    assert response.status_code == 202, response.json
    return int(response.json["id"])


def _job(client: Any, job_id: int) -> dict[str, Any]:
    return dict(client.get(f"{API}/jobs/{job_id}").json)


def test_a_note_behind_a_flood_of_undeclared_files_is_stored_before_most_of_them(
    gated_app: flask.Flask, recorder: RecordingEmbedder
) -> None:
    client = gated_app.test_client()
    flood = [_post_file(client, 0)]
    assert recorder.first_call.wait(60)  # the first file's model call waits at the gate
    flood += [_post_file(client, number) for number in range(1, FLOOD)]
    bulk = [_post_file(client, 1000 + number, priority="bulk") for number in range(BULK)]
    note = client.post(f"{API}/jobs", json={"text": "The heron count moved to Thursday."})
    assert note.status_code == 202 and note.json["priority"] == "interactive"
    # Let the worker prepare what it will before the model runs: the bulk jobs too, though files are queued.
    # Chunked (a job shows its progress then), not only claimed: a job is claimed ("running") before it is
    # read and chunked, and one still being read when the gate opened missed the next window (CI saw the last
    # bulk document stored after 59 of the files).
    wait_for(lambda: all("progress" in _job(client, job_id) for job_id in [*bulk, note.json["id"]]),
             "the bulk jobs and the note to be chunked")
    recorder.gate.set()

    jobs = {job_id: wait_job(client, job_id) for job_id in [*flood, *bulk, note.json["id"]]}
    assert all(job["status"] == "done" for job in jobs.values()), jobs  # every queued job completes
    stored = {job_id: job["document_id"] for job_id, job in jobs.items()}
    note_document = stored[note.json["id"]]
    after_note = sum(1 for job_id in flood if stored[job_id] > note_document)
    assert after_note >= FLOOD * 3 // 4, (after_note, stored)
    # The declared bulk load was not left for last: its share of each window put it ahead of most files.
    after_bulk = sum(1 for job_id in flood if stored[job_id] > max(stored[job_id] for job_id in bulk))
    assert after_bulk >= FLOOD // 2, (after_bulk, stored)
    assert sum(len(call) for call in recorder.calls) == FLOOD + BULK + 1  # one chunk each, each embedded once
