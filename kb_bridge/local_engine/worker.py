"""The ingestion worker: one background thread that runs queued jobs in order.

One thread is enough: embedding already uses every core through torch, and one writer is all SQLite
allows. Between jobs, once the model is ready, it embeds chunks that were stored without a vector.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import indexing, jobs, parsers
from .clock import now_iso
from .documents import NewDocument, derive_title, text_sha256
from .errors import IngestionError

if TYPE_CHECKING:
    from .engine import Engine

logger = logging.getLogger(__name__)

IDLE_POLL_SECONDS = 5.0


class IngestionWorker:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._backfill_pending = True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kb-engine-ingest", daemon=True)
        self._thread.start()

    def notify(self) -> None:
        """A job was queued: look now rather than at the next poll."""
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
            if not self._engine.embedders.wait(0.5):
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
        engine = self._engine
        with engine.db.write() as conn:
            job = jobs.claim_next(conn, now_iso())
        if job is None:
            return False
        logger.info("job %d (%s) started", job["id"], job["type"])
        try:
            new = self._read(job)
            prepared = indexing.prepare(engine, new.title, new.content, new.doc_type, self._stop)
            doc_id = indexing.create_document(engine, job["id"], new, prepared)
        except indexing.Abandoned:
            self._requeue(job["id"])
            return True
        except IngestionError as exc:
            self._fail(job, exc.message)
        except Exception as exc:
            logger.exception("job %d failed unexpectedly", job["id"])
            self._fail(job, f"internal error while ingesting ({type(exc).__name__}); see the engine log")
        else:
            logger.info("job %d done: document %d, %d chunks", job["id"], doc_id, len(prepared.texts))
            engine.staging.remove(self._staged_path(job))
        return True

    def _read(self, job: sqlite3.Row) -> NewDocument:
        """The document a job describes, with its text extracted."""
        payload: dict[str, Any] = json.loads(job["payload"] or "{}")
        tags = tuple(payload.get("tags") or ())
        if job["type"] == "note":
            text = str(payload.get("text") or "")
            data = text.encode("utf-8")
            return NewDocument(
                title=payload.get("title") or derive_title(text),
                doc_type="note",
                source_path=payload.get("source_path"),
                size_bytes=len(data),
                sha256=text_sha256(text),
                content=text,
                tags=tags,
            )
        path = self._staged_path(job)
        if path is None or not path.is_file():
            raise IngestionError("the uploaded file is missing from the engine's staging directory")
        doc_type = payload["doc_type"]
        filename = job["filename"] or path.name
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
        embedder = self._engine.embedders.current()
        if embedder is None or not self._backfill_pending:
            return False
        try:
            done = indexing.backfill_vectors(self._engine, embedder, self._engine.config.embed_batch_size * 8)
        except Exception:
            logger.exception("embedding stored chunks failed; giving up until the next start")
            done = 0
        if done:
            logger.info("embedded %d stored chunk(s) that had no vector", done)
        else:
            self._backfill_pending = False
        return bool(done)

    def _staged_path(self, job: sqlite3.Row) -> Path | None:
        return self._engine.staging.directory / job["staged_path"] if job["staged_path"] else None

    def _fail(self, job: sqlite3.Row, message: str) -> None:
        logger.warning("job %d failed: %s", job["id"], message)
        with self._engine.db.write() as conn:
            jobs.fail_job(conn, job["id"], message, now_iso())
        self._engine.staging.remove(self._staged_path(job))

    def _requeue(self, job_id: int) -> None:
        logger.info("job %d abandoned for shutdown; it runs again at the next start", job_id)
        with self._engine.db.write() as conn:
            jobs.requeue(conn, job_id)
