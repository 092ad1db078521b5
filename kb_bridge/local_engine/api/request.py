"""Request plumbing: uploads streamed into staging, and the id converter of the routes."""

from __future__ import annotations

from typing import IO

import flask
from werkzeug.routing import IntegerConverter

from ..engine import Engine


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
