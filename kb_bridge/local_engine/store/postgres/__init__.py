"""The PostgreSQL store: the engine's data in one PostgreSQL database with pgvector, shared by any number of
engine replicas (KB_ENGINE_DATABASE_URL).

Everything a replica needs is in the database: documents, chunks, vectors (pgvector `halfvec`, HNSW), tags,
jobs with their leases, and an uploaded file's bytes until its job is done. A replica's own data directory
holds only what it can rebuild: its full-text index (derived from the tables through the change log,
store/derived.py, and caught up before every search, so a job done on one replica is found on every other
at once), and uploads it is staging or running.

All of the store's SQL lives in this package: schema.py (migrations under an advisory lock), documents.py,
vectors.py (nearest-neighbour search in pgvector), jobs.py (the shared queue, SKIP LOCKED claims, leases),
index_log.py (the commit-ordered change log), importing.py (`kb-bridge migrate`'s bulk copy), db.py
(connections, timeouts, and the translation of an unreachable database into StoreUnavailable: HTTP 503).
The reads and writes both SQL stores share are ../sql_reads.py and ../sql_writes.py; a write search
follows goes through `_changing()` there, and this replica's text index has caught up when it returns.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import StorageFull, StoreUnavailable
from ..base import (
    JSON,
    duplicate_answer,
    ClaimedJob,
    DocumentFilter,
    FinishedJob,
    Idempotency,
    QueryTerms,
    Ranking,
    Submission,
)
from ..derived import DerivedIndexes
from ..sql_reads import SqlReads
from ..sql_writes import SqlWrites
from . import documents, history, index_log, jobs, note_keys, schema, vectors
from .db import Database, redacted

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

LEASE_SECONDS = 30.0
# How long open() keeps trying to reach the database before the engine gives up (exits non-zero).
CONNECT_FOR_SECONDS = 30.0
# pgvector's HNSW search breadth (its default is 40): 128 as in the SQLite engine's usearch index.
EF_SEARCH = 128
_REPLICA_FILE = "replica-id"


class PostgresStore(SqlReads, SqlWrites):
    kind = "postgresql"
    sql_documents = documents
    sql_jobs = jobs
    sql_history = history
    sql_note_keys = note_keys
    db: Database

    def __init__(self, url: str, data_dir: Path, uploads_dir: Path, title_repeats: int = 2,
                 lease_seconds: float = LEASE_SECONDS, keep_versions: int = 50) -> None:
        self.url = url
        self.keep_versions = keep_versions
        self.db = Database(url)
        self.uploads_dir = uploads_dir
        self.data_dir = data_dir
        self.lease_seconds = lease_seconds
        self.indexes = DerivedIndexes(self.db, index_log, data_dir / "indexes", title_repeats, 0, follow_vectors=False)
        self.replica = ""
        self._write_lock = threading.RLock()
        self._held: set[int] = set()
        self._held_lock = threading.Lock()
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None
        # Set once use_embeddings has made the vector table: vector searches only run with a model loaded,
        # so they need not ask the database on every query whether the table exists.
        self._vector_table = False

    # --- life -------------------------------------------------------------------------------------------------

    def open(self) -> int:
        self.replica = _replica_id(self.data_dir)
        version = prepare_database(self.url)
        logger.info("store: postgresql at %s, schema version %d, replica %s", redacted(self.url), version,
                    self.replica)
        with self.db.write() as conn:
            index_log.forget_before(conn)
        with self._write_lock:
            self.indexes.open()
        self._stop.clear()
        self._keeper = threading.Thread(target=self._keep_leases, name="kb-engine-leases", daemon=True)
        self._keeper.start()
        return version

    def close(self) -> None:
        self._stop.set()
        if self._keeper is not None:
            self._keeper.join(5)
        with self._write_lock:
            with contextlib.suppress(StoreUnavailable):
                self.indexes.close()
        self.db.close()

    def recover(self, idempotency_not_before: str, now: str) -> tuple[int, set[str]]:
        with self.db.write() as conn:
            resumed, _ = jobs.requeue_owned(conn, self.replica, now)  # those given up are logged there
            jobs.forget_idempotency_keys_before(conn, idempotency_not_before)
            in_use = jobs.staged_paths_in_use(conn)
        return resumed, in_use

    def _keep_leases(self) -> None:
        """Renew the leases of the jobs this replica holds, a third of a lease apart."""
        while not self._stop.wait(self.lease_seconds / 3):
            with self._held_lock:
                held = sorted(self._held)
            if not held:
                continue
            try:
                with self.db.write() as conn:
                    kept = jobs.renew_leases(conn, self.replica, held, self.lease_seconds)
            except (StoreUnavailable, StorageFull) as exc:  # the thread goes on: its leases must not lapse
                logger.warning("could not renew job leases: %s", exc.message)
                continue
            lost = set(held) - kept
            if lost:
                logger.warning("job(s) %s were taken over by another replica", sorted(lost))

    def _hold(self, job_id: int, held: bool) -> None:
        with self._held_lock:
            (self._held.add if held else self._held.discard)(job_id)

    # --- jobs -------------------------------------------------------------------------------------------------

    def submit(self, submission: Submission, idempotency: Idempotency | None, now: str) -> tuple[JSON, bool]:
        with self.db.write() as conn:
            if idempotency is not None:
                jobs.lock_idempotency_key(conn, idempotency.key)
                earlier = jobs.find_idempotent_job(conn, idempotency.key, idempotency.body_sha256,
                                                   idempotency.not_before)
                if earlier is not None:
                    return earlier, False
            unique = submission.unique
            if unique is not None:
                holder = note_keys.take(conn, unique.scope, unique.text_key)
                if holder is not None:
                    return duplicate_answer(conn, jobs, *holder), False
            job = jobs.create_job(conn, submission.type, now, dict(submission.payload), submission.filename,
                                  submission.staged_path, submission.priority)
            job_id = int(str(job["id"]))
            if unique is not None:
                note_keys.set_job(conn, unique.scope, unique.text_key, job_id)
            if submission.staged_path:
                jobs.store_upload(conn, job_id, _read_parts(self.uploads_dir / submission.staged_path))
            if idempotency is not None:
                jobs.remember_idempotency_key(conn, idempotency.key, idempotency.body_sha256, job_id,
                                              str(job["created_at"]))
            if submission.staged_path:
                # The bytes are in the database; whichever replica runs the job fetches them (claim_job), so
                # no replica keeps a copy for a job another one ran. Dropped before the commit: once the job
                # is committed this replica's files thread may claim it at once, keep the copy it finds here
                # and read it, and a drop after the commit took the file from under that read. (A commit
                # that fails leaves no job; the caller drops the upload then anyway.)
                (self.uploads_dir / submission.staged_path).unlink(missing_ok=True)
        return job, True

    def claim_job(self, now: str, priorities: Collection[int] | None = None,
                  job_type: str | None = None) -> ClaimedJob | None:
        with self.db.write() as conn:
            row = jobs.claim_next(conn, self.replica, self.lease_seconds, now, priorities, job_type)
        if row is None:
            return None
        self._hold(int(row["id"]), True)
        if row["staged_path"]:
            try:
                self._fetch_upload(int(row["id"]), self.uploads_dir / str(row["staged_path"]))
            except BaseException:
                # No thread runs the job now: held, its lease would be renewed for ever and no replica would
                # run it. Put it back; if the database is away for that too, the lease (no longer renewed)
                # runs out and any replica takes the job over.
                with contextlib.suppress(StoreUnavailable):
                    self.requeue_job(int(row["id"]))
                self._hold(int(row["id"]), False)
                raise
        payload: dict[str, Any] = json.loads(row["payload"] or "{}")
        return ClaimedJob(id=int(row["id"]), type=row["type"], filename=row["filename"], payload=payload,
                          staged_path=row["staged_path"], priority=int(row["priority"]),
                          resumes=int(row["resumes"]))

    def _fetch_upload(self, job_id: int, path: Path) -> None:
        """Bring a job's uploaded file into this replica's staging directory (another replica took it in)."""
        if path.is_file():
            return
        temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        try:
            with self.db.snapshot() as conn, open(temporary, "xb") as out:
                for part in jobs.upload_parts(conn, job_id):
                    out.write(part)
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)

    def complete_jobs(self, finished: Sequence[FinishedJob], now: str) -> dict[int, int]:
        stored: dict[int, int] = {}
        with self._changing() as conn:
            # A job appears here twice when this replica claimed it again after its own lease ran out (the
            # database away for longer than a lease) and both runs finished together: the lock taken for the
            # first says nothing about the second, which would store a second document. One run is stored.
            mine: list[FinishedJob] = []
            taken: set[int] = set()
            for item in finished:
                if item.job_id not in taken and jobs.take_for_completion(conn, item.job_id, self.replica):
                    mine.append(item)
                    taken.add(item.job_id)
            ids = documents.insert_documents(conn, [item.document for item in mine], now)
            for item, doc_id in zip(mine, ids, strict=True):
                chunk_ids = documents.insert_chunks(conn, doc_id, item.document.title, item.chunks.texts)
                documents.store_vectors(conn, chunk_ids, item.chunks.vectors)
                if item.original is not None:
                    documents.store_original_from_upload(conn, doc_id, item.job_id, item.original)
                jobs.finish_job(conn, item.job_id, doc_id, now)
                note_keys.job_stored(conn, item.job_id, doc_id)
                stored[item.job_id] = doc_id
        for item in finished:
            self._hold(item.job_id, False)
        skipped = [item.job_id for item in finished if item.job_id not in stored]
        if skipped:
            logger.warning("job(s) %s were taken over by another replica; their results here are dropped", skipped)
        return stored

    def fail_job(self, job_id: int, error: str, now: str) -> None:
        with self.db.write() as conn:
            jobs.fail_job(conn, job_id, self.replica, error, now)
            note_keys.job_ended(conn, job_id)
        self._hold(job_id, False)

    def set_working(self, job_ids: Collection[int], working: bool) -> None:
        if job_ids:
            with self.db.write() as conn:
                jobs.set_working(conn, sorted(job_ids), self.replica, working)

    def requeue_job(self, job_id: int) -> None:
        with self.db.write() as conn:
            jobs.requeue(conn, job_id, self.replica)
        self._hold(job_id, False)

    def cancel_job(self, job_id: int, now: str, running: bool = False) -> tuple[dict[str, object], str | None]:
        with self.db.write() as conn:
            cancelled = jobs.cancel_job(conn, job_id, now, self.replica if running else None)
            note_keys.job_ended(conn, job_id)
        if running:
            self._hold(job_id, False)
        return cancelled

    # --- chunks and vectors -----------------------------------------------------------------------------------

    def add_vectors(self, chunk_ids: Sequence[int], vectors: np.ndarray) -> int:
        with self.db.write() as conn:
            alive = documents.existing_chunk_ids(conn, chunk_ids)
            keep = [i for i, chunk_id in enumerate(chunk_ids) if chunk_id in alive]
            documents.store_vectors(conn, [chunk_ids[i] for i in keep], vectors[keep])
        return len(keep)

    def use_embeddings(self, identity: str, dim: int) -> int:
        with self.db.write() as conn:
            schema.vector_table(conn, dim)
            self._vector_table = True
            dropped = documents.use_model(conn, identity)
        if dropped is not None:
            logger.warning("stored vectors were made by %s; re-embedding with %s", dropped, identity)
        return self.vector_count()

    def vector_count(self) -> int:
        with self.db.snapshot() as conn:
            if not documents.has_vectors(conn):
                return 0
            return documents.vector_total(conn)

    def index_status(self) -> JSON:
        status = self.indexes.status()
        status["vectors"] = {"count": self.vector_count(), "search": "hnsw", "loaded": "pgvector"}
        return status

    # --- search ---------------------------------------------------------------------------------------------

    def _catch_up(self) -> None:
        with self._write_lock:
            self.indexes.catch_up()

    def _follow(self) -> None:
        """Bring the text index up to what the database holds now: another replica may have written."""
        with self.db.snapshot() as conn:
            head = index_log.last_seq(conn)
        if head > self.indexes.position:
            self._catch_up()

    def search_text(self, query: str, where: DocumentFilter, limit: int, filter_idf: bool = False,
                    terms: QueryTerms | None = None) -> Ranking:
        if terms is None:  # given terms come from query_terms, which has just followed
            self._follow()
        return super().search_text(query, where, limit, filter_idf, terms)

    def query_terms(self, query: str, where: DocumentFilter | None = None, filter_idf: bool = False) -> QueryTerms:
        self._follow()
        return super().query_terms(query, where, filter_idf)

    def search_vectors(self, vector: np.ndarray, k: int, where: DocumentFilter | None = None,
                       exclude_chunk: int | None = None, exclude_document: int | None = None) -> Ranking:
        if not self._vector_table:
            return []
        with self.db.snapshot() as conn:
            return vectors.nearest(conn, vector, k, where, exclude_chunk, exclude_document, max(EF_SEARCH, k))

    def similarities(self, vector: np.ndarray, chunk_ids: Iterable[int]) -> dict[int, float]:
        ids = list(chunk_ids)
        if not ids or not self._vector_table:
            return {}
        with self.db.snapshot() as conn:
            return vectors.similarities(conn, vector, ids)

    def vector_of(self, chunk_id: int) -> np.ndarray | None:
        if not self._vector_table:
            return None
        with self.db.snapshot() as conn:
            return vectors.vector_of(conn, chunk_id)

def prepare_database(url: str) -> int:
    """Reach the database (for up to CONNECT_FOR_SECONDS), create pgvector and the schema or upgrade it;
    the engine runs this in the foreground so that a bad URL or database stops it with a message."""
    database = Database(url)
    deadline = time.monotonic() + CONNECT_FOR_SECONDS
    while True:
        try:
            conn = database.connect()
            break
        except StoreUnavailable as exc:
            if time.monotonic() > deadline:
                raise StoreUnavailable(f"{exc.message} (at {redacted(url)}, tried for {CONNECT_FOR_SECONDS:.0f} s)") \
                    from None
            time.sleep(1.0)
    try:
        return schema.migrate(conn)
    finally:
        conn.close()


def _replica_id(data_dir: Path) -> str:
    """This replica's name in job leases: kept in its data directory, so a restarted replica takes back its
    own interrupted jobs at once (recover) instead of after their leases run out."""
    path = data_dir / _REPLICA_FILE
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        replica = uuid.uuid4().hex[:16]
        path.write_text(replica + "\n", encoding="utf-8")
        return replica


def _read_parts(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as staged:
        while part := staged.read(jobs.UPLOAD_PART_BYTES):
            yield part
