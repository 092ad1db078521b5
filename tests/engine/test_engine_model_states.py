"""The embedder's states: not installed, disabled, loading in the background, ready."""

from __future__ import annotations

import threading
from collections.abc import Callable

import flask
import pytest

from kb_bridge.local_engine.embedding import embedder as embedder_module
from kb_bridge.local_engine.app import engine_of
from kb_bridge.local_engine.errors import ConfigError

from kb_bridge.testing.engine_app import API, add_note, wait_for


def test_without_the_extra_auto_means_full_text_and_says_why(
    make_app: Callable[..., flask.Flask], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedder_module, "bundled_model_dir", lambda: None)
    client = make_app(embedder="auto").test_client()
    status = client.get(f"{API}/status").json
    assert status["model"] is None and status["search_modes"] == ["fts"]
    assert status["embedder"]["state"] == "disabled" and "kb-bridge[engine]" in status["embedder"]["reason"]
    add_note(client, "wren")
    assert client.post(f"{API}/search", json={"query": "wren"}).json["mode"] == "fts"


def test_minilm_required_but_missing_fails_at_start(
    make_app: Callable[..., flask.Flask], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedder_module, "bundled_model_dir", lambda: None)
    with pytest.raises(ConfigError, match="engine"):
        make_app(embedder="minilm")


def test_hybrid_answers_fts_while_the_model_loads_and_jobs_wait_for_it(
    make_app: Callable[..., flask.Flask], model: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()

    def slow_model(*args: object, **kwargs: object) -> object:
        gate.wait(30)
        return model

    # The real start-up path (background load), with a model that loads when the test says so.
    monkeypatch.setattr(embedder_module, "make_embedder", slow_model)
    app = make_app(embedder="minilm")
    engine = engine_of(app)
    client = app.test_client()
    status = client.get(f"{API}/status").json
    assert status["embedder"]["state"] == "loading" and status["search_modes"] == ["fts"]
    assert status["model"] is None
    job_id = client.post(f"{API}/jobs", json={"text": "a thrush sings at dawn"}).json["id"]
    assert client.post(f"{API}/search", json={"query": "thrush"}).json["mode"] == "fts"
    assert client.get(f"{API}/jobs/{job_id}").json["status"] == "queued"
    gate.set()
    wait_for(lambda: client.get(f"{API}/jobs/{job_id}").json["status"] == "done", "job after model load")
    assert engine.store.vector_count() == 1  # the job waited for the model, so its chunk has a vector
    result = client.post(f"{API}/search", json={"query": "bird singing in the morning"}).json
    assert result["mode"] == "hybrid" and result["results"][0]["text"] == "a thrush sings at dawn"


def test_a_model_that_fails_to_load_leaves_full_text_search(make_app: Callable[..., flask.Flask]) -> None:
    app = make_app()
    engine = engine_of(app)

    def broken() -> object:
        raise OSError("weights missing")

    engine.embedders.load(broken, background=False)  # type: ignore[arg-type]
    status = app.test_client().get(f"{API}/status").json
    assert status["embedder"]["state"] == "failed" and "weights missing" in status["embedder"]["reason"]
    assert status["search_modes"] == ["fts"]
