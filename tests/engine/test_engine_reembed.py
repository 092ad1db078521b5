"""Stores keep their vectors across number formats that agree; a format too far from the stored vectors'
is reported at start with the command to run; `kb-bridge engine --reembed` re-embeds every chunk, and an
interrupted run continues where it stopped (on SQLite, end to end through the engine and the CLI's code).

The embedders are stand-ins whose vectors say which of them made them (a real model cannot be told apart
from itself in another format by looking at one vector); their calibrated agreement is set by the test.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path

import flask
import numpy as np
import pytest

from kb_bridge.cli.progress import Progress
from kb_bridge.local_engine import reembed as reembed_module
from kb_bridge.local_engine.cli import build_parser, config_from_args
from kb_bridge.local_engine.config import EngineConfig
from kb_bridge.local_engine.embedding import store_precision
from kb_bridge.local_engine.reembed import PROGRESS_KEY, reembed

from kb_bridge.testing.engine_app import add_note

DIM = 8
NOTES = [f"note {n} about {topic}" for n, topic in enumerate(["birds", "tax", "rust", "tea", "maps", "jazz", "ice"])]


class StandIn:
    """Vectors from a hash of the text; `seed` tells the makers apart. `fail_after` raises KeyboardInterrupt
    on that call (an operator's Ctrl-C)."""

    name, dim, device, batch_size, runtime = "all-MiniLM-L6-v2", DIM, "cpu", 16, "onnx"

    def __init__(self, precision: str, cosine: float, seed: int, fail_after: int | None = None) -> None:
        self.document_precision = self.query_precision = precision
        self.document_agreement = self.query_agreement = cosine
        self.seed = seed
        self.fail_after = fail_after
        self.calls = 0

    def vector(self, text: str) -> np.ndarray:
        digest = hashlib.sha256(f"{self.seed}:{text}".encode()).digest()
        vector = np.frombuffer(digest[: DIM * 4], dtype=np.uint32).astype(np.float32) - 2**31
        return vector / np.linalg.norm(vector)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise KeyboardInterrupt
        return np.stack([self.vector(text) for text in texts]) if texts else np.empty((0, DIM), np.float32)

    def submit_query(self, text: str) -> Future[np.ndarray]:
        done: Future[np.ndarray] = Future()
        done.set_result(self.vector(text))
        return done

    def embed_query(self, text: str) -> np.ndarray:
        return self.vector(text)


FLOAT32 = dict(precision="float32", cosine=1.0)
FAR = dict(precision="int8", cosine=0.95)  # calibrated too far from float32 for the store's vectors


def stored(data: Path) -> tuple[dict[int, np.ndarray], dict[str, str]]:
    with sqlite3.connect(data / "engine.sqlite3") as conn:
        vectors = {row[0]: np.frombuffer(row[1], dtype=np.float32) for row in conn.execute(
            "SELECT chunk_id, vector FROM embeddings")}
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    return vectors, meta


def chunk_texts(data: Path) -> dict[int, tuple[str, str]]:
    with sqlite3.connect(data / "engine.sqlite3") as conn:
        return {row[0]: (row[1], row[2]) for row in conn.execute("SELECT id, title, text FROM chunks")}


def made_by(embedder: StandIn, data: Path) -> set[int]:
    from kb_bridge.local_engine.ingest.chunking import embedding_input

    vectors, _ = stored(data)
    return {chunk_id for chunk_id, (title, text) in chunk_texts(data).items()
            if np.allclose(vectors[chunk_id], embedder.vector(embedding_input(title, text)))}


@pytest.fixture
def written(make_app: Callable[..., flask.Flask], tmp_path: Path) -> Path:
    """A store written by a float32 engine."""
    app = make_app(model=StandIn(**FLOAT32, seed=1))
    client = app.test_client()
    for text in NOTES:
        add_note(client, text)
    from kb_bridge.local_engine.app import engine_of

    engine_of(app).close()
    return tmp_path / "data"


def start_with(make_app: Callable[..., flask.Flask], embedder: StandIn) -> None:
    from kb_bridge.local_engine.app import engine_of

    engine_of(make_app(model=embedder)).close()


def test_the_store_records_who_wrote_its_vectors(written: Path) -> None:
    _, meta = stored(written)
    assert json.loads(meta[store_precision.WRITERS_KEY]) == [{"runtime": "onnx", "precision": "float32", "cosine": 1.0}]


def test_a_format_that_agrees_keeps_the_store_as_it_is(make_app: Callable[..., flask.Flask], written: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    before, _ = stored(written)
    with caplog.at_level(logging.WARNING):
        start_with(make_app, StandIn(precision="int8", cosine=0.998, seed=2))
    after, meta = stored(written)
    assert "--reembed" not in caplog.text
    assert after.keys() == before.keys() and all(np.array_equal(after[key], before[key]) for key in before)
    assert [writer["precision"] for writer in json.loads(meta[store_precision.WRITERS_KEY])] == ["float32", "int8"]


def test_a_format_too_far_is_reported_at_start_with_the_command(make_app: Callable[..., flask.Flask], written: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        start_with(make_app, StandIn(**FAR, seed=2))
    assert "stored vectors were made by onnx/float32" in caplog.text
    assert "run `kb-bridge engine --reembed`" in caplog.text


def test_reembed_replaces_every_vector_and_resumes_after_an_interruption(
    make_app: Callable[..., flask.Flask], written: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(reembed_module, "WINDOW", 2)
    config = EngineConfig(data_dir=written, embedder="none")
    chunks = sorted(chunk_texts(written))
    assert len(chunks) == len(NOTES)

    interrupted = StandIn(**FAR, seed=2, fail_after=2)
    with pytest.raises(KeyboardInterrupt):
        reembed(config, Progress(io.StringIO(), bar=False), embedder=interrupted)
    _, meta = stored(written)
    assert json.loads(meta[PROGRESS_KEY])["after"] == chunks[3]  # two windows of two were written
    assert made_by(interrupted, written) == set(chunks[:4])  # the rest still hold the float32 vectors

    resumed = StandIn(**FAR, seed=2)
    lines = io.StringIO()
    assert reembed(config, Progress(lines, bar=False), embedder=resumed) == len(chunks) - 4
    assert "continuing after chunk" in lines.getvalue()
    assert made_by(resumed, written) == set(chunks)
    _, meta = stored(written)
    assert PROGRESS_KEY not in meta
    assert json.loads(meta[store_precision.WRITERS_KEY]) == [{"runtime": "onnx", "precision": "int8", "cosine": 0.95}]

    with caplog.at_level(logging.WARNING):
        start_with(make_app, StandIn(**FAR, seed=2))
    assert "--reembed" not in caplog.text  # the store is now this format's alone


def test_reembed_in_another_format_starts_over(written: Path) -> None:
    config = EngineConfig(data_dir=written, embedder="none")
    first = StandIn(**FAR, seed=2)
    reembed(config, Progress(io.StringIO(), bar=False), embedder=first)
    other = StandIn(precision="float32", cosine=1.0, seed=3)
    assert reembed(config, Progress(io.StringIO(), bar=False), embedder=other) == len(NOTES)
    assert made_by(other, written) == set(chunk_texts(written))


def test_the_engine_command_has_the_option(tmp_path: Path) -> None:
    args = build_parser().parse_args(["--reembed", "--data", str(tmp_path)])
    assert args.reembed and config_from_args(args).data_dir == tmp_path


def test_an_old_store_counts_as_written_at_the_lowest_earlier_agreement() -> None:
    unrecorded = store_precision.UNRECORDED
    assert store_precision.too_far([unrecorded], store_precision.Writer("onnx", "int8", 0.998)) == []
    assert store_precision.too_far([unrecorded], store_precision.Writer("onnx", "int8", 0.95)) == [unrecorded]
    assert store_precision.worst_cosine(1.0, 0.99) == pytest.approx(0.99)
