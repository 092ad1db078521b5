"""The ingestion worker: one background thread that runs queued jobs in order.

One thread is enough: embedding already uses every core through torch, and one writer is all SQLite
allows. Between jobs, once the model is ready, it embeds chunks that were stored without a vector. It is
given what it needs (the store, the embedder slot, the indexer, the staging directory), not the engine.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from ..clock import now_iso
from ..embedding.embedder import EmbedderSlot
from ..errors import IngestionError
from ..store.base import Abandoned, ClaimedJob, NewDocument, Store, text_sha256
from . import parsers
from .indexing import Indexer
from .notes import derive_title
from .staging import Staging

logger = logging.getLogger(__name__)

IDLE_POLL_SECONDS = 5.0


class IngestionWorker:
    def __init__(self, store: Store, embedders: EmbedderSlot, indexer: Indexer, staging: Staging) -> None:
        self._store = store
        self._embedders = embedders
        self._indexer = indexer
        self._staging = staging
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._backfill_pending = True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kb-engine-ingest", daemon=True)
        self._thread.start()

    def notify(self) -> None:
        """A job was queued (or the model became ready): look now rather than at the next poll."""
        self._wake.set()

    def stop(self, timeout: float) -> bool:
        """Ask the thread to stop after its current step; True if it did within `timeout`."""
        self._stop.set()
        self._wake.set()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            # While the model loads, jobs wait, so that documents get their vectors when they are written.
            if not self._embedders.wait(0.5):
                continue
            self._wake.clear()
            try:
                if self._run_one_job() or self._backfill_some():
                    continue
            except Exception:
                # A database error outside a job (disk full, locked too long): wait and try again.
                logger.exception("ingestion worker step failed; retrying in %.0f s", IDLE_POLL_SECONDS)
            self._wake.wait(IDLE_POLL_SECONDS)

    def _run_one_job(self) -> bool:
        job = self._store.claim_job(now_iso())
        if job is None:
            return False
        logger.info("job %d (%s) started", job.id, job.type)
        try:
            new = self._read(job)
            prepared = self._indexer.prepare(new.title, new.content, new.doc_type, self._stop)
            doc_id = self._store.complete_job(job.id, new, prepared, now_iso())
        except Abandoned:
            logger.info("job %d abandoned for shutdown; it runs again at the next start", job.id)
            self._store.requeue_job(job.id)
            return True
        except IngestionError as exc:
            self._fail(job, exc.message)
        except Exception as exc:
            logger.exception("job %d failed unexpectedly", job.id)
            self._fail(job, f"internal error while ingesting ({type(exc).__name__}); see the engine log")
        else:
            logger.info("job %d done: document %d, %d chunks", job.id, doc_id, len(prepared.texts))
            self._staging.remove(self._staged_path(job))
        return True

    def _read(self, job: ClaimedJob) -> NewDocument:
        """The document a job describes, with its text extracted."""
        payload = job.payload
        tags = tuple(payload.get("tags") or ())
        if job.type == "note":
            text = str(payload.get("text") or "")
            return NewDocument(
                title=payload.get("title") or derive_title(text),
                doc_type="note",
                source_path=payload.get("source_path"),
                size_bytes=len(text.encode("utf-8")),
                sha256=text_sha256(text),
                content=text,
                tags=tags,
            )
        path = self._staged_path(job)
        if path is None or not path.is_file():
            raise IngestionError("the uploaded file is missing from the engine's staging directory")
        doc_type = payload["doc_type"]
        filename = job.filename or path.name
        return NewDocument(
            title=payload.get("title") or filename,
            doc_type=doc_type,
            source_path=payload.get("source_path") or f"uploads/{filename}",
            size_bytes=int(payload["size"]),
            sha256=str(payload["sha256"]),
            content=parsers.extract_text(path, doc_type),
            tags=tags,
        )

    def _backfill_some(self) -> bool:
        embedder = self._embedders.current()
        if embedder is None or not self._backfill_pending:
            return False
        try:
            done = self._indexer.backfill(embedder, self._indexer.batch_size * 8)
        except Exception:
            logger.exception("embedding stored chunks failed; giving up until the next start")
            done = 0
        if done:
            logger.info("embedded %d stored chunk(s) that had no vector", done)
        else:
            self._backfill_pending = False
        return bool(done)

    def _staged_path(self, job: ClaimedJob) -> Path | None:
        return self._staging.directory / job.staged_path if job.staged_path else None

    def _fail(self, job: ClaimedJob, message: str) -> None:
        logger.warning("job %d failed: %s", job.id, message)
        self._store.fail_job(job.id, message, now_iso())
        self._staging.remove(self._staged_path(job))
