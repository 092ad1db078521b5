"""3.10: DELETE /api/v1/jobs/{id} takes back a queued job (status `cancelled`), 409 once it runs; a running job
shows how many of its chunks are embedded (`progress`). The queue is held by a model that is still loading
(the prepare thread claims nothing until the model settles: ingest/worker.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence

import flask
import numpy as np
import pytest
from flask.testing import FlaskClient

from kb_bridge.local_engine.app import engine_of
from kb_bridge.local_engine.embedding.embedder import Embedder, EmbedderSlot
from kb_bridge.local_engine.ingest import scheduling
from kb_bridge.local_engine.store.base import note_text_key

from kb_bridge.testing.engine_app import API, upload, wait_for, wait_job
from kb_bridge.testing.gated_engine import HashedModel

pytestmark = pytest.mark.both_stores


class GatedEmbedder(HashedModel):
    """A tiny stand-in model whose document calls wait at a gate (vectors from the text's hash)."""

    name = "gated-test-model"

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.calls = 0

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        assert self.gate.wait(60), "the test never opened the gate"
        return super().embed_documents(texts)


def begin_held_load(slot: EmbedderSlot) -> threading.Event:
    """Begin a load of the model that lasts until the returned event is set, then fails (full text only)."""
    gate = threading.Event()

    def loading() -> Embedder:
        gate.wait(60)
        raise RuntimeError("released by the test: full text only")

    slot.load(loading, background=True)
    return gate


@pytest.fixture
def held(app: flask.Flask) -> Iterator[tuple[FlaskClient, threading.Event]]:
    """An engine whose queue holds until the returned event is set (then it serves full text only)."""
    gate = begin_held_load(engine_of(app).embedders)
    yield app.test_client(), gate
    gate.set()


def test_a_queued_job_is_cancelled_and_stays_cancelled(held: tuple[FlaskClient, threading.Event]) -> None:
    client, gate = held
    job = client.post(f"{API}/jobs", json={"text": "never mind", "tags": ["collection:memory"]}).json
    assert job["status"] == "queued"
    cancelled = client.delete(f"{API}/jobs/{job['id']}")
    assert cancelled.status_code == 200
    assert cancelled.json["status"] == "cancelled" and cancelled.json["finished_at"] and cancelled.json["document_id"] is None
    again = client.delete(f"{API}/jobs/{job['id']}")
    assert again.status_code == 200 and again.json == cancelled.json
    gate.set()
    other = client.post(f"{API}/jobs", json={"text": "keep this one"}).json
    assert wait_job(client, other["id"])["status"] == "done"
    assert client.get(f"{API}/jobs/{job['id']}").json["status"] == "cancelled"  # never claimed afterwards
    assert client.get(f"{API}/status").json["queue"]["cancelled"] == 1


def test_a_load_begun_while_the_worker_is_about_to_claim_holds_the_job(
        make_app: Callable[..., flask.Flask], monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker waits for a settled model, then claims. A load that begins between the two (the fixture
    above begins one on a running engine) still holds the job: the claim is made under the slot's lock."""
    arrived, release, back = threading.Event(), threading.Event(), threading.Event()
    lanes_to_claim = scheduling.lanes_to_claim

    def between(*args: object) -> object:  # called after the worker's wait, before its claim
        arrived.set()
        assert release.wait(60), "the test never released the worker"
        return lanes_to_claim(*args)

    monkeypatch.setattr(scheduling, "lanes_to_claim", between)
    app = make_app()  # its worker's first round stops between its wait and its claim
    slot = engine_of(app).embedders

    def wait(timeout: float | None = None) -> bool:
        if release.is_set():
            back.set()  # the worker has decided and is waiting again
        return EmbedderSlot.wait(slot, timeout)

    monkeypatch.setattr(slot, "wait", wait)
    assert arrived.wait(60), "the worker never started"
    client = app.test_client()
    job = client.post(f"{API}/jobs", json={"text": "hold me"}).json
    gate = begin_held_load(slot)
    release.set()
    assert back.wait(60), "the worker never came back to wait for the model"
    assert client.get(f"{API}/jobs/{job['id']}").json["status"] == "queued"
    gate.set()
    assert wait_job(client, job["id"])["status"] == "done"


def test_a_cancelled_file_job_leaves_nothing_staged(app: flask.Flask, held: tuple[FlaskClient, threading.Event],
                                                    store: str) -> None:
    client, _gate = held
    staging = engine_of(app).staging.directory
    job = upload(client, "gulls.txt", b"Herring gulls steal chips.").json
    assert job["status"] == "queued"
    # SQLite keeps a queued file in staging; PostgreSQL keeps it in the database (job_uploads), for any replica.
    assert bool([p for p in staging.iterdir() if p.is_file()]) == (store == "sqlite")
    assert client.delete(f"{API}/jobs/{job['id']}").json["status"] == "cancelled"
    assert [p for p in staging.iterdir() if p.is_file()] == []


def test_a_job_that_ran_cannot_be_cancelled(held: tuple[FlaskClient, threading.Event]) -> None:
    client, gate = held
    gate.set()
    job = client.post(f"{API}/jobs", json={"text": "done soon"}).json
    wait_job(client, job["id"])
    refused = client.delete(f"{API}/jobs/{job['id']}")
    assert refused.status_code == 409 and refused.json["error"]["code"] == "conflict"
    assert "only a queued job" in refused.json["error"]["message"]
    assert client.delete(f"{API}/jobs/999999").status_code == 404


def test_a_running_job_shows_its_chunks_embedded(make_app: Callable[..., flask.Flask]) -> None:
    model = GatedEmbedder()
    client = make_app(model, chunk_chars=200, chunk_overlap=0).test_client()
    text = " ".join(f"sentence number {i} about the weather." for i in range(60))
    job = client.post(f"{API}/jobs", json={"text": text}).json
    running = wait_for(lambda: (j := client.get(f"{API}/jobs/{job['id']}").json).get("progress") and j, "progress")
    assert running["status"] == "running"
    assert running["progress"]["chunks_done"] == 0 and running["progress"]["chunks_total"] > 1
    model.gate.set()
    done = wait_job(client, job["id"])
    assert done["status"] == "done" and "progress" not in done


def _unique_note(client: FlaskClient, text: str) -> flask.Response:
    return client.post(f"{API}/jobs", json={"text": text, "tags": ["collection:memory"],
                                            "unique_in": "collection:memory"})


def test_a_cancelled_notes_text_can_be_added_again(held: tuple[FlaskClient, threading.Event]) -> None:
    """Cancelling a queued note frees its duplicate key: the same text sent again is queued and stored, not
    answered with the cancelled job (and `duplicate_of` null) while nothing is ever stored."""
    client, gate = held
    first = _unique_note(client, "Water the ferns on Fridays.")
    assert first.status_code == 202
    assert client.delete(f"{API}/jobs/{first.json['id']}").status_code == 200
    again = _unique_note(client, "Water the ferns on Fridays.")
    assert again.status_code == 202, again.json
    assert again.json["id"] != first.json["id"]
    gate.set()
    assert wait_job(client, again.json["id"])["status"] == "done"


def test_a_key_left_by_an_ended_job_never_blocks_a_new_note(app: flask.Flask) -> None:
    """A key still held by a job that ended without a document (as engines that kept a cancelled job's key
    left it) is free for the next note with that text."""
    client = app.test_client()
    gate = begin_held_load(engine_of(app).embedders)
    text = "Descale the kettle monthly."
    first = _unique_note(client, text).json
    assert client.delete(f"{API}/jobs/{first['id']}").status_code == 200
    with engine_of(app).store.db.write() as conn:  # type: ignore[attr-defined]
        conn.execute("DELETE FROM note_keys")
        conn.execute(f"INSERT INTO note_keys (scope, text_key, job_id) VALUES ('collection:memory', "
                     f"'{note_text_key(text)}', {first['id']})")
    again = _unique_note(client, text)
    assert again.status_code == 202 and again.json["id"] != first["id"], again.json
    gate.set()
    assert wait_job(client, again.json["id"])["status"] == "done"
