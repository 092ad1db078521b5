"""The sweeper: a daemon thread per process that removes idle uploads.

Every worker runs one; that is harmless because removal is guarded by the upload's lock and
an idle check made under it. stop() wakes it at once, so shutdown never waits an interval, and a
later start() runs it again (each run has its own stop event: a lifespan restart sweeps as before).
"""

from __future__ import annotations

import logging
import threading

from kb_bridge.uploads.store import UploadStore

logger = logging.getLogger(__name__)


class Sweeper:
    def __init__(self, store: UploadStore, ttl_seconds: float, interval: float) -> None:
        self._store = store
        self._ttl = ttl_seconds
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._run, args=(self._stop,), name="kb-upload-sweeper", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def sweep_once(self) -> int:
        try:
            removed = self._store.sweep(self._ttl)
        except Exception:  # the sweeper must outlive any one failed pass
            logger.exception("upload sweep failed")
            return 0
        if removed:
            logger.info("removed %d expired upload(s)", removed)
        return removed

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self._interval):
            self.sweep_once()
