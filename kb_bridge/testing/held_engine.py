"""A real local engine in the test process, served over HTTP, whose ingestion queue a test can hold: the
engine claims no job while its model is loading (ingest/worker.py, _prepare_loop), so `hold()` starts a
"model load" that waits for the returned event, and setting the event ends it (failing, so the engine goes
on with full-text search only, at once). Jobs queued meanwhile stay `queued`: cancellable, deterministically."""

from __future__ import annotations

import threading
from pathlib import Path

import flask
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from kb_bridge.local_engine.app import create_app, engine_of
from kb_bridge.local_engine.config import EngineConfig
from kb_bridge.local_engine.embedding.embedder import Embedder
from kb_bridge.testing.processes import free_port


class _Quiet(WSGIRequestHandler):
    def log_request(self, *args: object, **kwargs: object) -> None:
        """The bridges' access logs say what was asked."""


class HeldEngine:
    def __init__(self, data_dir: Path, api_key: str) -> None:
        port = free_port()
        self.app: flask.Flask = create_app(EngineConfig(data_dir=data_dir, api_key=api_key, embedder="none", port=port))
        self._server: BaseWSGIServer = make_server("127.0.0.1", port, self.app, threaded=True, request_handler=_Quiet)
        self._thread = threading.Thread(target=self._server.serve_forever, name="held-engine", daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{port}"
        self._gates: list[threading.Event] = []

    def hold(self) -> threading.Event:
        """Hold the queue until the returned event is set."""
        gate = threading.Event()
        self._gates.append(gate)

        def loading() -> Embedder:
            gate.wait(300)
            raise RuntimeError("the test released the queue: full text only")

        engine_of(self.app).embedders.load(loading, background=True)
        return gate

    def stop(self) -> None:
        for gate in self._gates:
            gate.set()
        self._server.shutdown()
        engine_of(self.app).close()
