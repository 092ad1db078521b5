"""The app factory: `create_app(config)` builds and starts an engine and returns its Flask app."""

from __future__ import annotations

from typing import IO

import flask
from werkzeug.routing import IntegerConverter

from . import auth, http_errors, routes
from .config import EngineConfig
from .embedder import Embedder
from .engine import Engine

# Room for the multipart envelope (boundaries, part headers, form fields) around a file of the maximum size.
MULTIPART_ENVELOPE_BYTES = 1024 * 1024


class EngineRequest(flask.Request):
    """Streams uploaded files into the engine's staging directory instead of /tmp or memory."""

    def _get_file_stream(
        self,
        total_content_length: int | None,
        content_type: str | None,
        filename: str | None = None,
        content_length: int | None = None,
    ) -> IO[bytes]:
        engine: Engine = flask.current_app.extensions["kb_engine"]
        return engine.staging.new_file()  # type: ignore[return-value]


class IdConverter(IntegerConverter):
    """Positive ids that fit SQLite's 64-bit integers; anything else is an unknown route (404)."""

    def __init__(self, map: object, *args: object, **kwargs: object) -> None:
        super().__init__(map, min=1, max=2**63 - 1)  # type: ignore[arg-type]


def create_app(config: EngineConfig, embedder: Embedder | None = None) -> flask.Flask:
    """Build the engine (database, model, worker) and its HTTP app.

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
    http_errors.init_app(app)
    auth.init_app(app, config.api_key)
    routes.register(app)
    return app


def engine_of(app: flask.Flask) -> Engine:
    engine: Engine = app.extensions["kb_engine"]
    return engine
