"""The app factory: `create_app(config)` builds and starts an engine and returns its Flask app."""

from __future__ import annotations

import flask

from . import api
from .api import auth, errors, guard
from .api.request import EngineRequest, IdConverter
from .config import EngineConfig
from .embedding.embedder import Embedder
from .engine import Engine

# Room for the multipart envelope (boundaries, part headers, form fields) around a file of the maximum size.
MULTIPART_ENVELOPE_BYTES = 1024 * 1024


def create_app(config: EngineConfig, embedder: Embedder | None = None) -> flask.Flask:
    """Build the engine (store, model, worker) and its HTTP app.

    `embedder` installs an already loaded model instead of the configured one (tests load it once).
    Call `engine_of(app).close()` when done.
    """
    engine = Engine(config)
    engine.start(embedder)
    app = flask.Flask(__name__)
    app.request_class = EngineRequest
    app.config["MAX_CONTENT_LENGTH"] = config.max_upload_bytes + MULTIPART_ENVELOPE_BYTES
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.url_map.converters["id"] = IdConverter
    app.extensions["kb_engine"] = engine
    errors.init_app(app)
    guard.init_app(app, config)
    auth.init_app(app, config.api_key)
    api.register(app)
    return app


def engine_of(app: flask.Flask) -> Engine:
    engine: Engine = app.extensions["kb_engine"]
    return engine
