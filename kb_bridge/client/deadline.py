"""One total deadline for all the engine requests of a tool call: connecting, sending, every read, the
retries and the waits between them.

requests' timeouts apply to each socket operation, so an engine that drips a byte a second never trips a
5-second read timeout, and a call could hang for as long as the engine likes. Here a deadline (a context
variable, set per tool call) bounds the whole: each attempt's connect and read timeouts are cut to what is
left, the retry policy stops when it runs out, and a watchdog thread shuts down the socket of an attempt
still in flight when it passes, so the blocked read returns at once and the call answers ENGINE_TIMEOUT.
"""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

_deadline: ContextVar[float | None] = ContextVar("kb_engine_deadline", default=None)
_current = threading.local()  # the attempt this thread is making: which connection it uses


def current() -> float | None:
    """The monotonic time the engine requests in progress must be done by, if one is set."""
    return _deadline.get()


def remaining() -> float | None:
    found = _deadline.get()
    return None if found is None else found - time.monotonic()


@contextmanager
def within(seconds: float) -> Iterator[float]:
    """Every engine request in this block is done by `seconds` from now (replacing an outer deadline)."""
    token = _deadline.set(time.monotonic() + seconds)
    try:
        yield seconds
    finally:
        _deadline.reset(token)


class Attempt:
    """One attempt at a request: the connection it goes over, once urllib3 has picked it."""

    __slots__ = ("conn", "expired", "done")

    def __init__(self) -> None:
        self.conn: Any = None
        self.expired = False
        self.done = False


class Watchdog:
    """Shuts down the socket of an attempt that outlives its deadline. One thread, started on first use."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Attempt]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    @contextmanager
    def watching(self, deadline: float) -> Iterator[Attempt]:
        """Watch the attempt made in this block (on this thread); `attempt.expired` says if it was cut."""
        attempt = Attempt()
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kb-engine-deadline", daemon=True)
                self._thread.start()
            heapq.heappush(self._heap, (deadline, next(self._order), attempt))
            if self._heap[0][2] is attempt:
                self._cond.notify()
        _current.attempt = attempt
        try:
            yield attempt
        finally:
            _current.attempt = None
            with self._cond:
                attempt.done = True

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                wait = self._heap[0][0] - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                _, _, attempt = heapq.heappop(self._heap)
                attempt.expired = True
                _shut(attempt.conn)


def _shut(conn: Any) -> None:
    sock = getattr(conn, "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # already closed
            pass


class _Watched:
    """Pool mixin: tell the thread's current attempt which connection its request goes over."""

    def _make_request(self, conn: Any, *args: Any, **kwargs: Any) -> Any:
        attempt = getattr(_current, "attempt", None)
        if attempt is not None:
            attempt.conn = conn
            if attempt.expired:
                _shut(conn)
        return super()._make_request(conn, *args, **kwargs)  # type: ignore[misc]


class WatchedHTTPConnectionPool(_Watched, HTTPConnectionPool):
    pass


class WatchedHTTPSConnectionPool(_Watched, HTTPSConnectionPool):
    pass


POOL_CLASSES = {"http": WatchedHTTPConnectionPool, "https": WatchedHTTPSConnectionPool}
