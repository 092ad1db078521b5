"""The SQLite store: one database file under the data directory (WAL) as the record, and two indexes
derived from it beside it: full text (tantivy) and vectors (usearch).

All of the store's SQL lives in this package: the schema and its migrations (schema.py), documents, chunks,
tags and vectors (documents.py), the job queue and idempotency keys (jobs.py), the change log the indexes
follow (index_log.py), the export of a whole store (export.py); ../derived.py keeps the indexes in step;
db.py hands each thread its own connection. The reads and writes both SQL stores share are
../sql_reads.py and ../sql_writes.py. One process per data directory (the engine's lock, datadir.py)
writes, and every write that the indexes follow goes through `_changing()` (../sql_writes.py): the store's
write lock across its transaction and the indexes' catch-up, so the indexes change in commit order and a
write returns only once it is searchable.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base import (
    JSON,
    RESUME_LIMIT_ERROR,
    duplicate_answer,
    ClaimedJob,
    DocumentFilter,
    FinishedJob,
    Idempotency,
    Ranking,
    Submission,
)
from ..derived import DerivedIndexes
from ..sql_reads import SqlReads
from ..sql_writes import SqlWrites
from . import documents, history, index_log, jobs, note_keys, schema
from .db import Database

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)



class SqliteStore(SqlReads, SqlWrites):
    kind = "sqlite"
    sql_documents = documents
    sql_jobs = jobs
    sql_history = history
    sql_note_keys = note_keys
    db: Database

    def __init__(self, path: Path, title_repeats: int = 2, exact_below: int = 20_000, keep_versions: int = 50) -> None:
        self.path = path
        self.keep_versions = keep_versions
        self.db = Database(path)
        self.indexes = DerivedIndexes(self.db, index_log, path.parent / "indexes", title_repeats, exact_below)
        self._write_lock = threading.RLock()

    # --- life -------------------------------------------------------------------------------------------------

    def open(self) -> int:
        version = schema.migrate(self.db.connection())
        logger.info("store: sqlite at %s, schema version %d", self.path, version)
        with self._write_lock:
            self.indexes.open()
        return version

    def close(self) -> None:
        with self._write_lock:
            self.indexes.close()
        self.db.close()

    def recover(self, idempotency_not_before: str, now: str) -> tuple[int, set[str]]:
        with self.db.write() as conn:
            finished = jobs.finish_stored(conn, now)
            resumed, given_up = jobs.requeue_running(conn, now)
            for job_id in given_up:
                note_keys.job_ended(conn, job_id)
            jobs.forget_idempotency_keys_before(conn, idempotency_not_before)
            in_use = jobs.staged_paths_in_use(conn)
        if finished:
            logger.info("%d job(s) had stored their document when the engine stopped: marked done", finished)
        if given_up:
            logger.warning("job(s) %s failed: %s", given_up, RESUME_LIMIT_ERROR)
        return resumed, in_use

    # --- jobs -------------------------------------------------------------------------------------------------

    def submit(self, submission: Submission, idempotency: Idempotency | None, now: str) -> tuple[JSON, bool]:
        with self.db.write() as conn:
            if idempotency is not None:
                earlier = jobs.find_idempotent_job(conn, idempotency.key, idempotency.body_sha256, idempotency.not_before)
                if earlier is not None:
                    return earlier, False
            unique = submission.unique
            if unique is not None:
                holder = note_keys.take(conn, unique.scope, unique.text_key)
                if holder is not None:
                    return duplicate_answer(conn, jobs, *holder), False
            job = jobs.create_job(conn, submission.type, now, payload=dict(submission.payload),
                                  filename=submission.filename, staged_path=submission.staged_path,
                                  priority=submission.priority)
            if unique is not None:
                note_keys.set_job(conn, unique.scope, unique.text_key, int(str(job["id"])))
            if idempotency is not None:
                jobs.remember_idempotency_key(conn, idempotency.key, idempotency.body_sha256, int(str(job["id"])),
                                              str(job["created_at"]))
        return job, True

    def claim_job(self, now: str, priorities: Collection[int] | None = None,
                  job_type: str | None = None) -> ClaimedJob | None:
        with self.db.write() as conn:
            row = jobs.claim_next(conn, now, priorities, job_type)
        if row is None:
            return None
        payload: dict[str, Any] = json.loads(row["payload"] or "{}")
        return ClaimedJob(id=row["id"], type=row["type"], filename=row["filename"], payload=payload,
                          staged_path=row["staged_path"], priority=row["priority"], resumes=row["resumes"])

    def complete_jobs(self, finished: Sequence[FinishedJob], now: str) -> dict[int, int]:
        stored: dict[int, int] = {}
        with self._write_lock:
            with self._changing() as conn:
                for item in finished:
                    status, attached = jobs.job_state(conn, item.job_id)
                    if status != "running":
                        continue  # not ours any more (cannot happen with one engine per data directory)
                    if attached is not None:
                        # Stored by an earlier attempt whose marking done (below) failed, which the worker
                        # writes again: it is marked done with that document, not given a second one.
                        stored[item.job_id] = attached
                        continue
                    doc_id = documents.insert_document(conn, item.document, now)
                    chunk_ids = documents.insert_chunks(conn, doc_id, item.document.title, item.chunks.texts)
                    documents.store_vectors(conn, chunk_ids, item.chunks.vectors)
                    if item.original is not None:
                        documents.store_original(conn, doc_id, item.original)
                    jobs.attach_document(conn, item.job_id, doc_id)
                    note_keys.job_stored(conn, item.job_id, doc_id)
                    stored[item.job_id] = doc_id
            # Done only once searchable (_changing caught the indexes up); a crash before the next step
            # leaves them running with their document, and recover() marks them done.
            with self.db.write() as conn:
                for job_id, doc_id in stored.items():
                    jobs.finish_job(conn, job_id, doc_id, now)
        return stored

    def fail_job(self, job_id: int, error: str, now: str) -> None:
        with self.db.write() as conn:
            status, attached = jobs.job_state(conn, job_id)
            if status == "running" and attached is not None:
                # Its document is stored; what failed came after (marking it done: the worker fails a job
                # it could not write alone). Failed, it would be sent again and stored twice.
                jobs.finish_job(conn, job_id, attached, now)
                return
            jobs.fail_job(conn, job_id, error, now)
            note_keys.job_ended(conn, job_id)

    def set_working(self, job_ids: Collection[int], working: bool) -> None:
        if job_ids:
            with self.db.write() as conn:
                jobs.set_working(conn, job_ids, working)

    def requeue_job(self, job_id: int) -> None:
        with self.db.write() as conn:
            jobs.requeue(conn, job_id)

    def cancel_job(self, job_id: int, now: str, running: bool = False) -> tuple[dict[str, object], str | None]:
        with self.db.write() as conn:
            cancelled = jobs.cancel_job(conn, job_id, now, running)
            note_keys.job_ended(conn, job_id)
        return cancelled

    # --- chunks and vectors -----------------------------------------------------------------------------------------

    def add_vectors(self, chunk_ids: Sequence[int], vectors: np.ndarray) -> int:
        with self._changing() as conn:
            alive = documents.existing_chunk_ids(conn, chunk_ids)
            keep = [i for i, chunk_id in enumerate(chunk_ids) if chunk_id in alive]
            documents.store_vectors(conn, [chunk_ids[i] for i in keep], vectors[keep])
        return len(keep)

    def use_embeddings(self, identity: str, dim: int) -> int:
        with self._write_lock:
            with self.db.write() as conn:
                dropped = documents.use_model(conn, identity)
            if dropped is not None:
                logger.warning("stored vectors were made by %s; re-embedding with %s", dropped, identity)
            return self.indexes.use_vectors(identity, dim)

    def vector_count(self) -> int:
        vectors = self.indexes.vectors
        return len(vectors) if vectors is not None else 0

    def index_status(self) -> JSON:
        return self.indexes.status()

    # --- search -----------------------------------------------------------------------------------------------------

    def search_vectors(self, vector: np.ndarray, k: int, where: DocumentFilter | None = None,
                       exclude_chunk: int | None = None, exclude_document: int | None = None) -> Ranking:
        index = self.indexes.vectors
        if index is None:
            return []
        allowed = None
        excluded: set[int] = set() if exclude_chunk is None else {exclude_chunk}
        if (where is not None and not where.is_empty()) or exclude_document is not None:
            with self.db.snapshot() as conn:
                if where is not None and not where.is_empty():
                    allowed = documents.matching_chunk_ids(conn, where)
                if exclude_document is not None:
                    excluded.update(documents.chunk_ids_of(conn, exclude_document))
        return index.search(vector, k, allowed, excluded)

    def similarities(self, vector: np.ndarray, chunk_ids: Iterable[int]) -> dict[int, float]:
        index = self.indexes.vectors
        return index.similarities(vector, chunk_ids) if index is not None else {}

    def vector_of(self, chunk_id: int) -> np.ndarray | None:
        index = self.indexes.vectors
        return index.vector_of(chunk_id) if index is not None else None

