"""Metrics: a small interface the bridge reports through, and its Prometheus implementation.

Under gunicorn every worker is a process of its own, so the Prometheus client runs in
multiprocess mode: serving/gunicorn.py (run by gunicorn.conf.py) points PROMETHEUS_MULTIPROC_DIR
at a fresh directory before any worker starts, each worker writes its samples there, and /metrics (served by
whichever worker takes the scrape) merges all of them. Upload figures are read from the shared
upload store at scrape time, so they are the same whichever worker answers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any, Protocol

logger = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class StagedUploads(Protocol):
    """What the upload figures are read from: the shared upload store (uploads/store.py), declared here by
    the one call metrics makes so that metrics needs nothing of uploads/."""

    def stats(self) -> tuple[int, int]:
        """(uploads in progress, bytes staged) across every caller."""
        ...


class Metrics:
    """Records nothing: the default when metrics are off, and the interface's definition."""

    def tool_call(self, tool: str, outcome: str, seconds: float) -> None:
        """One finished tool call; outcome is "ok" or an error code."""

    def engine_request(self, endpoint: str, outcome: str, seconds: float) -> None:
        """One attempt at an engine request; outcome is the HTTP status or a transport error."""

    def engine_retry(self, endpoint: str) -> None:
        """An engine request is being tried again."""

    def auth_failure(self, reason: str) -> None:
        """A request refused at the door (missing or wrong token, bad host or origin)."""

    def exposition(self) -> tuple[bytes, str]:
        """The body and content type of /metrics."""
        return b"", "text/plain"


class PrometheusMetrics(Metrics):
    def __init__(self, uploads: StagedUploads | None = None) -> None:
        # Imported here: in multiprocess mode prometheus_client must be imported after
        # PROMETHEUS_MULTIPROC_DIR is set, i.e. in the worker, never at module import.
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self._multiprocess = bool(os.environ.get(MULTIPROC_ENV))
        self._registry = CollectorRegistry()
        registry = None if self._multiprocess else self._registry
        self._tool_calls = Counter(
            "kb_bridge_tool_calls", "Tool calls by tool and outcome (ok or error code).", ["tool", "outcome"], registry=registry
        )
        self._tool_seconds = Histogram(
            "kb_bridge_tool_duration_seconds", "Tool call latency.", ["tool"], buckets=LATENCY_BUCKETS, registry=registry
        )
        self._engine_seconds = Histogram(
            "kb_bridge_engine_request_duration_seconds",
            "Engine request attempts by endpoint and outcome (HTTP status or transport error).",
            ["endpoint", "outcome"], buckets=LATENCY_BUCKETS, registry=registry,
        )
        self._engine_retries = Counter(
            "kb_bridge_engine_retries", "Engine requests tried again, by endpoint.", ["endpoint"], registry=registry
        )
        self._auth_failures = Counter(
            "kb_bridge_auth_failures", "Requests refused at the door (Host/Origin on any path, tokens), by reason.", ["reason"], registry=registry
        )
        self._uploads = uploads
        if not self._multiprocess and uploads is not None:
            self._registry.register(_UploadCollector(uploads))

    def tool_call(self, tool: str, outcome: str, seconds: float) -> None:
        self._tool_calls.labels(tool, outcome).inc()
        self._tool_seconds.labels(tool).observe(seconds)

    def engine_request(self, endpoint: str, outcome: str, seconds: float) -> None:
        self._engine_seconds.labels(endpoint, outcome).observe(seconds)

    def engine_retry(self, endpoint: str) -> None:
        self._engine_retries.labels(endpoint).inc()

    def auth_failure(self, reason: str) -> None:
        self._auth_failures.labels(reason).inc()

    def exposition(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        registry = self._registry
        if self._multiprocess:
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            registry.register(_WrittenFilesCollector(os.environ[MULTIPROC_ENV], multiprocess.MultiProcessCollector))
            if self._uploads is not None:
                registry.register(_UploadCollector(self._uploads))
        return generate_latest(registry), CONTENT_TYPE_LATEST


class _WrittenFilesCollector:
    """prometheus_client's multiprocess collector, minus the files a process is still creating. A worker creates
    a metric type's file empty and sizes it a moment later; a scrape reading it in between failed whole with
    struct.error (prometheus/client_python#1199), once a scrape can overlap a worker's first sample of a kind
    (console and ops requests run on several threads, web/wsgi.py). Such a file holds no sample yet."""

    def __init__(self, path: str, collector: Any) -> None:
        self._path = path
        self._collector = collector

    def collect(self) -> Iterator[Any]:
        import glob

        files = []
        for name in glob.glob(os.path.join(self._path, "*.db")):
            try:
                if os.path.getsize(name) >= 8:  # the header (bytes used) is written when the file is sized
                    files.append(name)
            except OSError:
                continue  # removed meanwhile (a dead worker's live gauges)
        return iter(self._collector.merge(files, accumulate=True))


class _UploadCollector:
    """Uploads in progress and bytes staged, read from the shared store when scraped."""

    def __init__(self, store: StagedUploads) -> None:
        self._store = store

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        try:
            uploads, staged = self._store.stats()
        except Exception:  # the store's own failure (Redis unreachable): any, since this module knows no store
            # Left out of this scrape rather than failing it whole: the other metrics matter most while the
            # store is down. The store has logged why.
            logger.warning("upload figures left out of /metrics: the upload store could not be read")
            return
        yield GaugeMetricFamily("kb_bridge_uploads_in_progress", "Uploads started and not yet finished.", value=uploads)
        yield GaugeMetricFamily("kb_bridge_upload_staged_bytes", "Bytes staged by uploads in progress.", value=staged)


def mark_worker_dead(pid: int) -> None:
    """gunicorn child_exit hook: fold a dead worker's live gauges out of the shared files."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
