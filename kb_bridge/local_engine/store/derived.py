"""Derived indexes: full text (tantivy) and vectors (usearch), kept in step with a store's tables.

The database is the record; the indexes are copies that can always be rebuilt from it. Every change to
chunks, tags and vectors appends to the store's change log in the same transaction, in commit order
(sqlite/index_log.py, postgres/index_log.py: the `ChangeLog` below), and `catch_up` applies the log to the
indexes after each write (and, on PostgreSQL, before each search: another replica may have written). Applying is idempotent: an entry means "make this chunk
(document, vector) in the index look like the tables do now", so replaying entries twice, or entries whose
rows have since gone, is harmless. That makes the indexes crash-consistent without a two-phase commit:

- the text index commits with the log position it reaches (text_index.py); the vector index is saved
  every `SAVE_EVERY_CHANGES` changes or `SAVE_EVERY_SECONDS`, and at close, with its position
  (vector_index.py); at the next start each replays the log from its own position;
- the log is pruned only up to the position both have on disk; an index older than the pruned part, of
  another database (a restored file: `index_epoch`), of another model or layout, or unreadable, is
  rebuilt from the tables.

A job is marked done only after `catch_up` (sqlite/__init__.py), so a finished job is searchable.
All methods run under the store's write lock; searches read the indexes concurrently. The PostgreSQL store
keeps its vectors in pgvector and follows the log for full text only (`follow_vectors=False`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .text_index import ChunkRow, TextIndex

if TYPE_CHECKING:
    from .vector_index import VectorIndex

logger = logging.getLogger(__name__)

SAVE_EVERY_CHANGES = 100_000
SAVE_EVERY_SECONDS = 600.0
SAVE_RETRY_SECONDS = 60.0  # after a save that failed (a full disk): not at every write meanwhile
# If vectors have not been in use for this many logged changes (an engine run without a model), stop
# keeping the log for them: a later start rebuilds them from the table instead.
MAX_VECTOR_LAG = 2_000_000
_READ = 20_000
_PROGRESS_EVERY = 100_000


class Transactions(Protocol):
    """A store's database access: a consistent read, and a write transaction."""

    def snapshot(self) -> contextlib.AbstractContextManager[Any]: ...

    def write(self) -> contextlib.AbstractContextManager[Any]: ...


class ChangeLog(Protocol):
    """A store's change log and the rows the indexes are built from (each function takes a connection)."""

    def changes_after(self, conn: Any, seq: int, limit: int) -> list[tuple[int, str, int]]: ...

    def last_seq(self, conn: Any) -> int: ...

    def prune(self, conn: Any, through: int) -> None: ...

    def pruned_through(self, conn: Any) -> int: ...

    def epoch(self, conn: Any) -> str: ...

    def chunk_rows(self, conn: Any, chunk_ids: Sequence[int]) -> list[ChunkRow]: ...

    def document_chunk_rows(self, conn: Any, document_ids: Sequence[int]) -> list[ChunkRow]: ...

    def all_chunk_rows(self, conn: Any, batch: int = ...) -> Iterator[list[ChunkRow]]: ...

    def vectors(self, conn: Any, chunk_ids: Sequence[int]) -> dict[int, bytes]: ...

    def all_vectors(self, conn: Any, batch: int = ...) -> Iterator[list[tuple[int, bytes]]]: ...


class DerivedIndexes:
    def __init__(self, db: Transactions, log: ChangeLog, directory: Path, title_repeats: int, exact_below: int,
                 follow_vectors: bool = True) -> None:
        self.db = db
        self.log = log
        self.follow_vectors = follow_vectors
        self.exact_below = exact_below
        self.directory = directory
        self.title_repeats = title_repeats
        self.text: TextIndex | None = None
        self.vectors: VectorIndex | None = None  # once a model's vectors are served (imported lazily: numpy)
        self._epoch = ""
        self._text_position = 0  # applied (committed or not); the text index's own position is on disk
        self._vector_identity: dict[str, object] = {}
        self.vector_source: str | None = None  # "restored" from disk, or "built" from the table
        self._vector_position = 0
        self._vector_floor: int | None = None  # the vectors' position on disk, while it may still be used
        self._unsaved = 0
        self._last_save = time.monotonic()
        self._save_retry_at = 0.0

    @property
    def position(self) -> int:
        """How far into the change log the text index has applied."""
        return self._text_position

    @property
    def vector_path(self) -> Path:
        return self.directory / "vectors.usearch"

    # --- life ------------------------------------------------------------------------------------------------

    def open(self) -> None:
        """Open the text index (rebuilding it if it cannot follow the log) and bring it up to date."""
        with self.db.snapshot() as conn:
            self._epoch = self.log.epoch(conn)
            self.text = TextIndex(self.directory / "text", self._epoch, self.title_repeats)
            if self.text.position is None or self.text.position < self.log.pruned_through(conn) \
                    or self.text.position > self.log.last_seq(conn):
                # Past the log's end: the database is a copy from before changes the index has (a backup
                # restored, which keeps its index_epoch); reading on would skip the copy's next changes.
                self._rebuild_text(conn)
        self._text_position = int(self.text.position or 0)
        if self.follow_vectors and _has_vector_library():
            from .vector_index import remove_temporary_files, saved_manifest

            remove_temporary_files(self.vector_path)  # a save killed half-way
            saved = saved_manifest(self.vector_path)
            if saved.get("database") == self._epoch and isinstance(saved.get("position"), int):
                self._vector_floor = int(str(saved["position"]))
        self.catch_up()

    def use_vectors(self, model: str, dim: int) -> int:
        """Serve the vectors of this model: the saved index brought up to date, or one built from the table."""
        from .vector_index import VectorIndex, saved_manifest

        self._vector_identity = {"database": self._epoch, "model": model}
        restored = VectorIndex.restore(self.vector_path, self._vector_identity, dim, self.exact_below)
        position = saved_manifest(self.vector_path).get("position")
        with self.db.snapshot() as conn:
            if restored is not None and isinstance(position, int) \
                    and self.log.pruned_through(conn) <= position <= self.log.last_seq(conn):
                logger.info("vector index restored (%d vectors); replaying the changes since it was saved",
                            len(restored))
                self.vectors, self._vector_position = restored, position
                self.vector_source = "restored"
            else:
                self.vectors, self._vector_position = self._build_vectors(conn, dim), self.log.last_seq(conn)
                self._unsaved = max(1, len(self.vectors))
                self.vector_source = "built"
        self._vector_floor = self._vector_position
        self.catch_up()
        if self._unsaved:
            self._try_saving_vectors()
        return len(self.vectors)

    def _build_vectors(self, conn: Any, dim: int) -> VectorIndex:
        from .vector_index import VectorIndex, from_blobs

        started = time.monotonic()
        index = VectorIndex(dim, exact_below=self.exact_below)
        for rows in self.log.all_vectors(conn, _READ):
            rows = [row for row in rows if len(row[1]) == dim * 4]
            index.add([row[0] for row in rows], from_blobs([row[1] for row in rows], dim), threads=0)
            if len(index) % _PROGRESS_EVERY < _READ:
                logger.info("building the vector index: %d vectors", len(index))
        logger.info("vector index built: %d vectors in %.1f s", len(index), time.monotonic() - started)
        return index

    def close(self) -> None:
        if self.vectors is not None and self._unsaved:
            self._try_saving_vectors()
        if self.text is not None:
            self.text.close()

    # --- following the log ------------------------------------------------------------------------------------

    def catch_up(self) -> int:
        """Apply the log's new entries to the indexes; returns how many were read."""
        read = 0
        while True:
            with self.db.snapshot() as conn:
                # Asked in the snapshot the changes are read in: entries may be forgotten between two reads.
                self._rebuild_text_if_forgotten(conn)
                start = self._text_position if self.vectors is None else min(self._text_position,
                                                                              self._vector_position)
                changes = self.log.changes_after(conn, start, _READ)
                if not changes:
                    break
                self._apply_text(conn, [c for c in changes if c[0] > self._text_position])
                if self.vectors is not None:
                    self._apply_vectors(conn, [c for c in changes if c[0] > self._vector_position])
                    self._vector_position = max(self._vector_position, changes[-1][0])
            read += len(changes)
            self._text_position = max(self._text_position, changes[-1][0])
        if read:
            self._maybe_save_vectors()
            try:
                self._prune()
            except Exception as exc:
                # Housekeeping after a write that is stored and indexed (a full disk refuses the DELETE too):
                # the log is pruned after a later write instead.
                logger.warning("pruning the change log failed: %s", exc)
        return read

    def _rebuild_text_if_forgotten(self, conn: Any) -> None:
        """Rebuild the text index when the log no longer holds entries it has not applied. On SQLite this
        process alone prunes, never past its own position; on PostgreSQL a replica starting forgets entries
        older than a week (postgres/index_log.forget_before), which a replica that has run all along without a
        search or a write since has not applied: reading on from its position would skip them for good."""
        assert self.text is not None
        if self._text_position >= self.log.pruned_through(conn):
            return
        logger.warning("the change log no longer holds changes this full-text index has not applied "
                       "(position %d); rebuilding it", self._text_position)
        self._rebuild_text(conn)
        self._text_position = int(self.text.position or 0)

    def _apply_text(self, conn: Any, changes: Sequence[tuple[int, str, int]]) -> None:
        assert self.text is not None
        if not changes:
            return
        documents = sorted({id_ for _, kind, id_ in changes if kind == "document"})
        chunks = sorted({id_ for _, kind, id_ in changes if kind == "chunk"})
        if not documents and not chunks:
            return  # only vectors changed
        if documents:
            self.text.remove_documents(documents)
            self.text.put(self.log.document_chunk_rows(conn, documents))
        if chunks:
            present = self.log.chunk_rows(conn, chunks)
            found = {row[0] for row in present}
            self.text.remove_chunks(chunk_id for chunk_id in chunks if chunk_id not in found)
            self.text.put(row for row in present if row[1] not in documents)
        self.text.commit(changes[-1][0])

    def _apply_vectors(self, conn: Any, changes: Sequence[tuple[int, str, int]]) -> None:
        from .vector_index import from_blobs

        assert self.vectors is not None
        chunk_ids = sorted({id_ for _, kind, id_ in changes if kind == "vector"})
        if not chunk_ids:
            return
        stored = self.log.vectors(conn, chunk_ids)
        dim = self.vectors.dim
        present = [chunk_id for chunk_id in chunk_ids if len(stored.get(chunk_id, b"")) == dim * 4]
        self.vectors.remove(chunk_id for chunk_id in chunk_ids if chunk_id not in stored)
        if present:
            self.vectors.add(present, from_blobs([stored[chunk_id] for chunk_id in present], dim))
        self._unsaved += len(chunk_ids)

    def _rebuild_text(self, conn: Any) -> None:
        assert self.text is not None
        started = time.monotonic()
        logger.info("building the full-text index from the database")
        position = self.log.last_seq(conn)
        self.text.clear()
        count = 0
        for rows in self.log.all_chunk_rows(conn, _READ):
            self.text.put(rows)
            count += len(rows)
            if count % _PROGRESS_EVERY < _READ:
                logger.info("building the full-text index: %d chunks", count)
        self.text.commit(position)
        logger.info("full-text index built: %d chunks in %.1f s", count, time.monotonic() - started)

    # --- saving and pruning ----------------------------------------------------------------------------------

    def _maybe_save_vectors(self) -> None:
        if self.vectors is None or not self._unsaved or time.monotonic() < self._save_retry_at:
            return
        if self._unsaved >= SAVE_EVERY_CHANGES or time.monotonic() - self._last_save >= SAVE_EVERY_SECONDS:
            self._try_saving_vectors()

    def _try_saving_vectors(self) -> None:
        """Save the vector index, or log why not. A save only shortens the replay at the next start: the log
        is kept from the last save that succeeded, so a failed one loses nothing, and must not fail the write
        that happened to trigger it (stored, and searchable in memory). Tried again `SAVE_RETRY_SECONDS` on."""
        try:
            self._save_vectors()
        except (OSError, RuntimeError) as exc:  # usearch: RuntimeError("Failed to serialize into stream")
            self._save_retry_at = time.monotonic() + SAVE_RETRY_SECONDS
            logger.error("saving the vector index to %s failed (a full disk?): %s; the change log is kept from "
                         "its last save and replayed at the next start", self.vector_path, exc)

    def _save_vectors(self) -> None:
        assert self.vectors is not None
        started = time.monotonic()
        self.vectors.save(self.vector_path, {**self._vector_identity, "position": self._vector_position})
        self._vector_floor = self._vector_position
        self._unsaved = 0
        self._last_save = time.monotonic()
        logger.debug("vector index saved (%d vectors) in %.2f s", len(self.vectors), self._last_save - started)

    def _prune(self) -> None:
        assert self.text is not None
        through = int(self.text.position or 0)
        if self._vector_floor is not None:
            if self.vectors is None and through - self._vector_floor > MAX_VECTOR_LAG:
                logger.info("vectors unused for %d changes: they will be rebuilt when a model is loaded",
                            through - self._vector_floor)
                self._vector_floor = None
            else:
                through = min(through, self._vector_floor)
        with self.db.write() as conn:
            if through > self.log.pruned_through(conn):
                self.log.prune(conn, through)

    def status(self) -> dict[str, object]:
        """What /api/v1/status shows of the indexes."""
        vectors: dict[str, object] = {"count": 0, "search": None}
        if self.vectors is not None:
            search = "exact" if len(self.vectors) < self.exact_below else "hnsw"
            vectors = {"count": len(self.vectors), "search": search, "loaded": self.vector_source}
        return {"text": {"chunks": len(self.text) if self.text is not None else 0}, "vectors": vectors}


def _has_vector_library() -> bool:
    """Whether usearch (and numpy) are installed: the `engine` extra."""
    import importlib.util

    return importlib.util.find_spec("usearch") is not None
