"""The SQLite store: one database file under the data directory (WAL), with FTS5 for full text and the
vectors kept in SQLite and served from an in-memory index.

All of the store's SQL lives in this package: the schema and its migrations (schema.py), documents, chunks,
tags and vectors (documents.py), the job queue and idempotency keys (jobs.py), BM25 (fts.py); db.py hands
each thread its own connection. One process per data directory (the engine's lock, datadir.py) is the
only writer, so the in-memory vector index (store/vectors.py) is a cache that changes together with the
database: every write that touches vectors holds `_write_lock` across the commit and the index update.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base import (
    JSON,
    Abandoned,
    ClaimedJob,
    DocumentFilter,
    Idempotency,
    NewDocument,
    PreparedChunks,
    Ranking,
    Submission,
    check_note,
    check_version,
)
from . import documents, fts, jobs, schema
from .db import Database

if TYPE_CHECKING:
    import numpy as np

    from ..vectors import VectorIndex

logger = logging.getLogger(__name__)

class SqliteStore:
    kind = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = Database(path)
        self._write_lock = threading.RLock()
        self._vectors: VectorIndex | None = None

    # --- life -------------------------------------------------------------------------------------------------

    def open(self) -> int:
        version = schema.migrate(self.db.connection())
        logger.info("database %s at schema version %d", self.path, version)
        return version

    def close(self) -> None:
        self.db.close()

    def recover(self, idempotency_not_before: str) -> tuple[int, set[str]]:
        with self.db.write() as conn:
            resumed = jobs.requeue_running(conn)
            jobs.forget_idempotency_keys_before(conn, idempotency_not_before)
            return resumed, jobs.staged_paths_in_use(conn)

    # --- jobs -------------------------------------------------------------------------------------------------

    def submit(self, submission: Submission, idempotency: Idempotency | None, now: str) -> tuple[JSON, bool]:
        with self.db.write() as conn:
            if idempotency is not None:
                earlier = jobs.find_idempotent_job(conn, idempotency.key, idempotency.body_sha256, idempotency.not_before)
                if earlier is not None:
                    return earlier, False
            job = jobs.create_job(conn, submission.type, now, payload=dict(submission.payload),
                                  filename=submission.filename, staged_path=submission.staged_path)
            if idempotency is not None:
                jobs.remember_idempotency_key(conn, idempotency.key, idempotency.body_sha256, int(str(job["id"])),
                                              str(job["created_at"]))
        return job, True

    def get_job(self, job_id: int) -> JSON:
        with self.db.snapshot() as conn:
            return jobs.get_job(conn, job_id)

    def list_jobs(self, status: str | None, limit: int, offset: int) -> tuple[list[JSON], int]:
        with self.db.snapshot() as conn:
            return jobs.list_jobs(conn, status, limit, offset)

    def queue_counts(self) -> dict[str, int]:
        with self.db.snapshot() as conn:
            return jobs.queue_counts(conn)

    def claim_job(self, now: str) -> ClaimedJob | None:
        with self.db.write() as conn:
            row = jobs.claim_next(conn, now)
        if row is None:
            return None
        payload: dict[str, Any] = json.loads(row["payload"] or "{}")
        return ClaimedJob(id=row["id"], type=row["type"], filename=row["filename"], payload=payload,
                          staged_path=row["staged_path"])

    def complete_job(self, job_id: int, new: NewDocument, chunks: PreparedChunks, now: str) -> int:
        with self._write_lock:
            with self.db.write() as conn:
                if jobs.job_status(conn, job_id) != "running":
                    raise Abandoned()  # not ours any more (cannot happen with one engine per data dir)
                doc_id = documents.insert_document(conn, new, now)
                chunk_ids = documents.insert_chunks(conn, doc_id, new.title, chunks.texts)
                self._store_vectors(conn, chunk_ids, chunks.vectors)
                jobs.finish_job(conn, job_id, doc_id, now)
            self._index_vectors(chunk_ids, doc_id, chunks.vectors)
        return doc_id

    def fail_job(self, job_id: int, error: str, now: str) -> None:
        with self.db.write() as conn:
            jobs.fail_job(conn, job_id, error, now)

    def requeue_job(self, job_id: int) -> None:
        with self.db.write() as conn:
            jobs.requeue(conn, job_id)

    # --- documents and tags -------------------------------------------------------------------------------------

    def get_document(self, doc_id: int, detail: bool = False) -> JSON:
        with self.db.snapshot() as conn:
            return documents.get_document_detail(conn, doc_id) if detail else documents.get_document(conn, doc_id)

    def list_documents(self, where: DocumentFilter, limit: int, offset: int) -> tuple[list[JSON], int]:
        with self.db.snapshot() as conn:
            return documents.list_documents(conn, where, limit, offset)

    def delete_document(self, doc_id: int) -> None:
        with self._write_lock:
            with self.db.write() as conn:
                chunk_ids = documents.delete_document(conn, doc_id)
            if self._vectors is not None:
                self._vectors.remove(chunk_ids)

    def replace_note(
        self, doc_id: int, title: str, text: str, chunks: PreparedChunks, if_match: Collection[str] | None, now: str
    ) -> JSON:
        with self._write_lock:
            with self.db.write() as conn:
                row = documents.require_document(conn, doc_id)
                check_note(row["doc_type"], row["version"], doc_id, if_match)
                old_chunk_ids = documents.delete_chunks(conn, doc_id)
                documents.update_note(conn, doc_id, title, text, now)
                chunk_ids = documents.insert_chunks(conn, doc_id, title, chunks.texts)
                self._store_vectors(conn, chunk_ids, chunks.vectors)
                jobs.record_finished_update(conn, doc_id, now)
            if self._vectors is not None:
                self._vectors.remove(old_chunk_ids)
            self._index_vectors(chunk_ids, doc_id, chunks.vectors)
        return self.get_document(doc_id)

    def add_tags(self, doc_id: int, tags: Sequence[str], now: str) -> JSON:
        with self.db.write() as conn:
            return documents.add_tags(conn, doc_id, tags, now)

    def remove_tag(self, doc_id: int, tag: str, now: str) -> JSON:
        with self.db.write() as conn:
            return documents.remove_tag(conn, doc_id, tag, now)

    def patch_tags(self, doc_id: int, add: Sequence[str], remove: Sequence[str], if_match: Collection[str] | None,
                   now: str) -> JSON:
        with self.db.write() as conn:
            row = documents.require_document(conn, doc_id)
            check_version(row["version"], doc_id, if_match)
            return documents.change_tags(conn, doc_id, add, remove, now)

    def list_tags(self, prefix: str | None) -> list[JSON]:
        with self.db.snapshot() as conn:
            return documents.list_tags(conn, prefix)

    def counts(self) -> dict[str, int]:
        with self.db.snapshot() as conn:
            return documents.counts(conn)

    # --- chunks and vectors -----------------------------------------------------------------------------------------

    def get_chunks(self, chunk_ids: Sequence[int]) -> dict[int, JSON]:
        with self.db.snapshot() as conn:
            return documents.get_chunks(conn, chunk_ids)

    def stored_vectors(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], bytes]:
        with self.db.snapshot() as conn:
            return documents.stored_vectors_by_text(conn, keys)

    def chunks_without_vectors(self, limit: int) -> list[tuple[int, int, str, str]]:
        with self.db.snapshot() as conn:
            return [tuple(row) for row in documents.chunks_without_vectors(conn, limit)]  # type: ignore[misc]

    def add_vectors(self, chunk_ids: Sequence[int], vectors: np.ndarray) -> int:
        with self._write_lock:
            with self.db.write() as conn:
                alive = documents.existing_chunk_ids(conn, chunk_ids)
                keep = [i for i, chunk_id in enumerate(chunk_ids) if chunk_id in alive]
                kept_ids = [chunk_ids[i] for i in keep]
                self._store_vectors(conn, kept_ids, vectors[keep])
                owners = documents.documents_of_chunks(conn, kept_ids)
            if self._vectors is not None and keep:
                self._vectors.add(kept_ids, [owners[chunk_id] for chunk_id in kept_ids], vectors[keep])
        return len(keep)

    def use_embeddings(self, identity: str, dim: int) -> int:
        from ..vectors import VectorIndex

        with self._write_lock:
            with self.db.write() as conn:
                row = conn.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
                if row is not None and row[0] != identity:
                    logger.warning("stored vectors were made by %s; re-embedding with %s", row[0], identity)
                    conn.execute("DELETE FROM embeddings")
                conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('embedding_model', ?)", (identity,))
            index = VectorIndex(dim)
            with self.db.snapshot() as conn:
                for chunk_ids, doc_ids, vectors in documents.stored_vector_batches(conn, dim):
                    index.add(chunk_ids, doc_ids, vectors)
            self._vectors = index
        return len(index)

    def vector_count(self) -> int:
        return len(self._vectors) if self._vectors is not None else 0

    def _store_vectors(self, conn: sqlite3.Connection, chunk_ids: Sequence[int], vectors: np.ndarray | None) -> None:
        if vectors is None or not len(chunk_ids):
            return
        from ..vectors import to_blob

        documents.store_vectors(conn, ((cid, to_blob(vec)) for cid, vec in zip(chunk_ids, vectors, strict=True)))

    def _index_vectors(self, chunk_ids: Sequence[int], doc_id: int, vectors: np.ndarray | None) -> None:
        if self._vectors is not None and vectors is not None:
            self._vectors.add(chunk_ids, [doc_id] * len(chunk_ids), vectors)

    # --- search -----------------------------------------------------------------------------------------------------

    def search_text(self, query: str, where: DocumentFilter, limit: int, title_weight: float,
                    text_weight: float) -> Ranking:
        with self.db.snapshot() as conn:
            return fts.search(conn, query, where, limit, title_weight, text_weight)

    def text_score_ceiling(self, query: str) -> float:
        with self.db.snapshot() as conn:
            return fts.score_ceiling(conn, query)

    def search_vectors(self, vector: np.ndarray, k: int, where: DocumentFilter | None = None,
                       exclude_chunk: int | None = None, exclude_document: int | None = None) -> Ranking:
        if self._vectors is None:
            return []
        allowed = None
        if where is not None and not where.is_empty():
            with self.db.snapshot() as conn:
                allowed = documents.matching_document_ids(conn, where)
        return self._vectors.search(vector, k, allowed, exclude_chunk=exclude_chunk, exclude_document=exclude_document)

    def similarities(self, vector: np.ndarray, chunk_ids: Iterable[int]) -> dict[int, float]:
        return self._vectors.similarities(vector, chunk_ids) if self._vectors is not None else {}

    def vector_of(self, chunk_id: int) -> np.ndarray | None:
        return self._vectors.vector_of(chunk_id) if self._vectors is not None else None

