"""A fault-injecting HTTP proxy in front of a real engine: it forwards requests and, on the
requests a test chooses, answers 5xx, garbage, slowly, or forwards and then withholds the
answer (the write happened; the bridge never hears of it)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests

from kb_bridge.testing.processes import free_port

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization", "proxy-authenticate"}


@dataclass
class Fault:
    """What to do to one request: `status` answers it without forwarding; `garbage` answers
    a body that is not JSON; `delay` waits before forwarding; `withhold` forwards it, then
    waits that long and drops the connection without answering."""

    status: int | None = None
    garbage: bool = False
    delay: float = 0.0
    withhold: float | None = None


Rule = Callable[[str, str, int], Fault | None]
"""(method, path, how many matching requests came before) → the fault for this one, or None."""


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.rules: list[Rule] = []
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fault_for(self, method: str, path: str) -> Fault | None:
        key = f"{method} {path.split('?')[0]}"
        with self._lock:
            before = self._counts.get(key, 0)
            self._counts[key] = before + 1
        for rule in self.rules:
            fault = rule(method, path, before)
            if fault is not None:
                return fault
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP and k.lower() != "host"}
                with proxy._lock:
                    proxy.seen.append((self.command, self.path, dict(self.headers.items())))
                fault = proxy.fault_for(self.command, self.path) or Fault()
                if fault.status is not None:
                    return self._answer(fault.status, json.dumps({"error": {"code": "internal", "message": "injected"}}).encode())
                if fault.garbage:
                    return self._answer(200, b"<html><body>Bad Gateway? no: garbage</body></html>", "text/html")
                if fault.delay:
                    time.sleep(fault.delay)  # the engine being slow is the condition under test
                upstream = requests.request(self.command, proxy.upstream + self.path, data=body, headers=headers, timeout=120)
                if fault.withhold is not None:
                    time.sleep(fault.withhold)  # the write happened; its answer never arrives
                    self.close_connection = True
                    return
                self._answer(upstream.status_code, upstream.content, upstream.headers.get("Content-Type", "application/json"))

            def _answer(self, status: int, payload: bytes, content_type: str = "application/json") -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = do_PATCH = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
