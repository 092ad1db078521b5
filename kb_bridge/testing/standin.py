"""An engine stand-in for tests and benchmarks of the bridge's own behaviour under engine
conditions the real engine does not produce on demand (slow answers, an old version). It speaks
just enough of docs/engine-api.md, records what it received, and runs on a free loopback port.

It is an asyncio server on its own thread: one event loop serves every connection, so a
hundred concurrent slow answers cost nothing but timers (a thread per connection would make the
stand-in, not the bridge, the bottleneck of a load test).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

from kb_bridge.testing.processes import free_port


class StandInEngine:
    def __init__(self, delay: float = 0.0, version: str = "3.0.0", gate: int = 0, drip: float = 0.0) -> None:
        self.delay = delay
        # With drip, a search's answer goes out one byte every `drip` seconds, headers included: an
        # engine that never stops answering, so no single read ever times out.
        self.drip = drip
        # A test may answer requests itself: (method, path) -> (status, JSON payload), or None for the default.
        self.custom: Callable[[str, str], tuple[int, Any] | None] | None = None
        self.version = version
        # With a gate, searches are held until that many are in flight at once (or 10 s pass):
        # a test then knows the calls overlapped, instead of hoping its timing made them.
        self.gate = gate
        self._gate_open: asyncio.Event | None = None
        self.received: list[str] = []
        self.authorizations: list[str | None] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> StandInEngine:
        self._thread.start()
        self._started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port, backlog=1024))
        self._started.set()
        self._loop.run_forever()
        self._server.close()
        # Let every open connection's handler end before the loop goes away.
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    def answer(self, method: str, path: str) -> tuple[int, Any]:
        found = self.custom(method, path) if self.custom is not None else None
        if found is not None:
            return found
        if path.startswith("/api/v1/status"):
            return 200, {"version": self.version, "api": "v1", "model": None, "device": "cpu", "search_modes": ["fts"],
                         "documents": {"total": 0, "notes": 0, "files": 0}, "chunks": 0,
                         "queue": {"queued": 0, "running": 0, "done": 0, "failed": 0}}
        if path.startswith("/api/v1/search"):
            return 200, {"query": "q", "mode": "fts", "took_ms": self.delay * 1000, "results": []}
        if path.startswith("/api/v1/tags"):  # the console's search page lists the collections (kb_collections)
            return 200, {"tags": []}
        if path.startswith("/healthz"):
            return 200, {"ok": True}
        return 404, {"error": {"code": "not_found", "message": "not here"}}

    async def _wait_for_gate(self) -> None:
        if self._gate_open is None:
            self._gate_open = asyncio.Event()
        if self.in_flight >= self.gate:
            self._gate_open.set()
        try:
            await asyncio.wait_for(self._gate_open.wait(), 10)
        except asyncio.TimeoutError:
            pass  # the test sees peak_in_flight below the gate and fails with that figure

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request_line = await reader.readline()
                if not request_line:
                    return
                method, path, _ = request_line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length") or 0)
                if length:
                    await reader.readexactly(length)
                self.received.append(f"{method} {path}")
                self.authorizations.append(headers.get("authorization"))
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
                try:
                    if self.gate and path.startswith("/api/v1/search"):
                        await self._wait_for_gate()
                    if self.delay and not path.startswith(("/healthz", "/api/v1/status")):
                        await asyncio.sleep(self.delay)  # the engine being slow is the condition under test
                    status, payload = self.answer(method, path)
                finally:
                    self.in_flight -= 1
                body = json.dumps(payload).encode()
                answer = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
                if self.drip and path.startswith("/api/v1/search"):
                    for i in range(len(answer)):
                        writer.write(answer[i : i + 1])
                        await writer.drain()
                        await asyncio.sleep(self.drip)
                else:
                    writer.write(answer)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError, asyncio.CancelledError):
            return
        finally:
            writer.close()
