"""The HTTP protocol the bridge's uvicorn worker speaks: uvicorn's httptools protocol, bounded against slow
clients.

Without bounds, 2,000 sockets that send half a request head and stall (or drip a byte a second) hold a
worker's connection allowance, and everyone else, /healthz included, is answered 503. So:

- a request head (request line and headers) must arrive within `header_timeout` (KB_HEADER_TIMEOUT) from
  the connection's first byte or from the start of the request, else 408 and the connection is closed;
- a request body must arrive whole within `body_timeout` (KB_BODY_TIMEOUT) of its head, else 408 (or, once
  the answer has begun, the connection is closed);
- at most `max_connections` (KB_MAX_CONNECTIONS) are open at once; a new connection beyond that closes the
  oldest one that has no request in progress (idle, or still sending its head), so slow or idle clients
  can never lock out a new one; only when every connection has a request in progress is a new request
  answered 503 (uvicorn's own bound, set one above);
- a request head may be at most MAX_HEAD_BYTES, else 431 and the connection is closed. httptools puts no
  bound on it: a bearer token of 84 MB, sent within the head timeout, took a worker to 253 MiB (and kept
  169 MiB), before any auth could refuse it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_TIMEOUT_ANSWER = b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_HEAD_TOO_LARGE_ANSWER = b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
# The largest request head (request line and headers): a JWT the bridge checks is at most 16 KiB
# (auth/oauth.py looks_like_jwt), proxies' defaults are 8-32 KiB; this leaves room for both together.
MAX_HEAD_BYTES = 64 * 1024


class Limits:
    """The bounds, set by the worker from the bridge's settings (serving/worker.py)."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_connections: int = 1000


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    limits = Limits

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._busy = False  # a request is in progress (its head has arrived, its answer is not done)
        self._since = time.monotonic()
        self._head_done = False  # the current request's head has been parsed
        self._head_bytes = 0  # bytes received while it had not

    # --- connections ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.limits.max_connections:
            self._evict_one()
        super().connection_made(transport)
        self._arm(self.limits.header_timeout)

    def _evict_one(self) -> None:
        """Close the oldest connection without a request in progress (it holds nothing that is lost)."""
        idle = [c for c in self.connections if isinstance(c, BoundedHttpToolsProtocol) and not c._busy
                and not c.transport.is_closing()]
        if idle:
            oldest = min(idle, key=lambda c: c._since)
            oldest._disarm()
            oldest.transport.close()
            # Out of the count at once (its connection_lost comes a loop turn later), so that the new
            # connection's request is never refused for a connection already on its way out.
            self.connections.discard(oldest)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    # --- the request head --------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        # Counted per received piece, before httptools holds it: a head still unfinished past the bound is
        # refused, so a connection holds at most the bound and one piece (a piece that also carries the
        # head's end and body bytes is parsed first, and the head is then done).
        if not self._head_done:
            self._head_bytes += len(data)
        super().data_received(data)
        if not self._head_done and self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
            self._disarm()
            self.transport.write(_HEAD_TOO_LARGE_ANSWER)
            self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._since = time.monotonic()
        if self._timer is None:  # the first request's clock started when the connection was made
            self._arm(self.limits.header_timeout)

    def on_headers_complete(self) -> None:
        self._head_done = True
        self._busy = True
        self._arm(self.limits.body_timeout)
        super().on_headers_complete()

    # --- the request body ----------------------------------------------------------------------------

    def on_message_complete(self) -> None:
        self._disarm()
        self._head_done, self._head_bytes = False, 0  # the next request's head is counted afresh
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._busy = False
        self._since = time.monotonic()
        super().on_response_complete()

    # --- timers -----------------------------------------------------------------------------------------

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, self._timed_out)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        # The head never came (not busy), or the body stalled before any answer began: say so.
        if not self._busy or (self.cycle is not None and not self.cycle.response_started):
            self.transport.write(_TIMEOUT_ANSWER)
        self.transport.close()
