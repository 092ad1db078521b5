"""The Bridge: the long-lived parts one process shares (engine client, upload store, thread pool,
sweeper, metrics), built from settings and started and stopped by the server's lifespan."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio.to_thread
from asgiref.sync import sync_to_async

from kb_bridge.client.engine import EngineClient
from kb_bridge.metrics import Metrics, PrometheusMetrics
from kb_bridge.redaction import Redactor
from kb_bridge.settings import Settings
from kb_bridge.uploads.factory import make_upload_store
from kb_bridge.uploads.store import UploadStore
from kb_bridge.uploads.sweeper import Sweeper

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Bridge:
    def __init__(
        self,
        settings: Settings,
        engine: EngineClient | None = None,
        uploads: UploadStore | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.uploads = uploads or make_upload_store(settings)
        self.metrics = metrics or (PrometheusMetrics(self.uploads) if settings.mcp.metrics else Metrics())
        self.engine = engine or EngineClient(settings.engine, metrics=self.metrics, redact=Redactor(settings.secrets()))
        self._executor: ThreadPoolExecutor | None = None
        self._wrapped: dict[Callable[..., Any], Callable[..., Awaitable[Any]]] = {}
        self._users = 0  # lifespans currently entered (one per transport session manager)
        self._sweeper = Sweeper(self.uploads, settings.uploads.ttl_seconds, settings.uploads.sweep_interval)

    @property
    def executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            raise RuntimeError("the bridge is not running (enter its lifespan first)")
        return self._executor

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run blocking work (engine calls, staging I/O) on the bounded pool, off the event loop.
        `fn` is a long-lived function (a tool handler, a module function): its wrapper is kept."""
        wrapped = self._wrapped.get(fn)
        if wrapped is None:
            # One SyncToAsync per function, not per call: building it is a measurable share of a
            # trivial call's cost (bench/concurrency.py). Reset with the pool it is bound to.
            wrapped = self._wrapped[fn] = sync_to_async(fn, thread_sensitive=False, executor=self.executor)
        return await wrapped(*args)

    def start(self) -> None:
        if self._executor is None:
            # Bounded: at most this many tool calls run at once per process; the rest wait their turn.
            self._executor = ThreadPoolExecutor(
                max_workers=self.settings.mcp.thread_pool_size, thread_name_prefix="kb-tool"
            )
            self._sweeper.start()

    def stop(self, wait: bool = True) -> None:
        """Stop; with `wait`, after the calls in flight finish (the HTTP server stopped sending new ones before
        this), else at once: what is left of them runs on, its answer unsent."""
        self._sweeper.stop()
        if self._executor is not None:
            self._executor.shutdown(wait=wait, cancel_futures=not wait)
            self._executor = None
            self._wrapped.clear()
        self.engine.close()

    @asynccontextmanager
    async def lifespan(self, _server: Any) -> AsyncIterator[dict[str, Any]]:
        """Start on the first entry, stop when the last user leaves (the HTTP app runs two
        transport managers over one bridge)."""
        self._users += 1
        self.start()
        cancelled = False
        try:
            yield {"bridge": self}
        except BaseException:
            # Cancelled or interrupted (Ctrl-C on stdio): the calls in flight will not be answered, and an engine
            # request that does not come back would hold the stop until its deadline (KB_ENGINE_TIMEOUT).
            cancelled = True
            raise
        finally:
            self._users -= 1
            if self._users == 0:
                # Off the event loop, which turns meanwhile: in-flight handlers may still need it (progress
                # notifications), and so do calls threads have sent it (stdio's writer saying stdout is closed),
                # which a loop shutting down at once would cancel.
                await anyio.to_thread.run_sync(functools.partial(self.stop, wait=not cancelled))
