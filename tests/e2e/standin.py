"""An engine stand-in for tests of the bridge's own behaviour under engine conditions the real
engine does not produce on demand (slow answers, an old version). It speaks just enough of
engine-api.md, records what it received, and runs on a free loopback port in a thread."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.e2e.processes import free_port


class StandInEngine:
    def __init__(self, delay: float = 0.0, version: str = "3.0.0") -> None:
        self.delay = delay
        self.version = version
        self.received: list[str] = []
        self.authorizations: list[str | None] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self._lock = threading.Lock()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> StandInEngine:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, method: str, path: str) -> tuple[int, Any]:
        if path.startswith("/api/v1/status"):
            return 200, {"version": self.version, "api": "v1", "model": None, "device": "cpu", "search_modes": ["fts"],
                         "documents": {"total": 0, "notes": 0, "files": 0}, "chunks": 0,
                         "queue": {"queued": 0, "running": 0, "done": 0, "failed": 0}}
        if path.startswith("/api/v1/search"):
            return 200, {"query": "q", "mode": "fts", "took_ms": self.delay * 1000, "results": []}
        if path.startswith("/healthz"):
            return 200, {"ok": True}
        return 404, {"error": {"code": "not_found", "message": "not here"}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                with engine._lock:
                    engine.received.append(f"{self.command} {self.path}")
                    engine.authorizations.append(self.headers.get("Authorization"))
                    engine.in_flight += 1
                    engine.peak_in_flight = max(engine.peak_in_flight, engine.in_flight)
                try:
                    if engine.delay and not self.path.startswith(("/healthz", "/api/v1/status")):
                        time.sleep(engine.delay)  # the engine being slow is the condition under test
                    status, payload = engine.answer(self.command, self.path)
                finally:
                    with engine._lock:
                        engine.in_flight -= 1
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
