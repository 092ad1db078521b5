"""Writing documents: chunk, embed, then store chunks, vectors and FTS rows in one transaction.

The slow part (parsing, embedding) runs outside any transaction. The write runs under the engine's write
lock, which also covers the in-memory vector index update after the commit, so the index never disagrees
with the database in a way a later write could not correct. A job's document and the job's `done` status
are committed together: an engine killed at any moment leaves either both or neither, and a re-run job
never produces a second document.
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import threading
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from . import documents, jobs
from .chunking import chunk_text, embedding_input
from .clock import now_iso
from .errors import IngestionError, NotANote, PreconditionFailed

if TYPE_CHECKING:
    import numpy as np

    from .embedder import Embedder
    from .engine import Engine

logger = logging.getLogger(__name__)


class Abandoned(Exception):
    """The engine is stopping; the current job is left for the next start."""


@dataclasses.dataclass(frozen=True)
class PreparedChunks:
    texts: list[str]
    vectors: np.ndarray | None  # one row per text, or None without an embedder


def prepare(
    engine: Engine, title: str, text: str, doc_type: str, stop: threading.Event | None = None
) -> PreparedChunks:
    texts = chunk_text(text, doc_type, engine.chunking)
    if not texts:
        raise IngestionError("the document has no text to index")
    embedder = engine.embedders.current()
    vectors = embed(engine, embedder, [(title, chunk) for chunk in texts], stop) if embedder is not None else None
    return PreparedChunks(texts, vectors)


def embed(
    engine: Engine, embedder: Embedder, chunks: Sequence[tuple[str, str]], stop: threading.Event | None
) -> np.ndarray:
    """Vectors for (title, text) chunks, in batches.

    A chunk whose title and text are both already stored with a vector reuses it: the model read the same input.
    """
    import numpy as np

    keys = [(title, documents.text_sha256(text)) for title, text in chunks]
    stored = documents.stored_vectors_by_text(engine.db.connection(), keys)
    vectors = np.zeros((len(chunks), embedder.dim), dtype=np.float32)
    missing: list[int] = []
    for row, key in enumerate(keys):
        blob = stored.get(key)
        if blob is not None and len(blob) == embedder.dim * 4:
            vectors[row] = np.frombuffer(blob, dtype="<f4")
        else:
            missing.append(row)
    batch = engine.config.embed_batch_size
    for start in range(0, len(missing), batch):
        if stop is not None and stop.is_set():
            raise Abandoned()
        rows = missing[start : start + batch]
        vectors[rows] = embedder.embed_documents([embedding_input(*chunks[row]) for row in rows])
    return vectors


def create_document(engine: Engine, job_id: int, new: documents.NewDocument, prepared: PreparedChunks) -> int:
    """Store a job's document and mark the job done, atomically. Returns the document id."""
    with engine.write_lock:
        with engine.db.write() as conn:
            if jobs.job_status(conn, job_id) != "running":
                raise Abandoned()  # not ours any more (cannot happen with one engine per data dir)
            now = now_iso()
            doc_id = documents.insert_document(conn, new, now)
            chunk_ids = documents.insert_chunks(conn, doc_id, new.title, prepared.texts)
            _store_vectors(conn, chunk_ids, prepared.vectors)
            jobs.finish_job(conn, job_id, doc_id, now)
        _index_vectors(engine, chunk_ids, doc_id, prepared.vectors)
    return doc_id


def update_note(
    engine: Engine, doc_id: int, text: str | None, title: str | None, if_match: Collection[str] | None
) -> dict[str, object]:
    """Replace a note's text and/or title: re-chunk, re-embed, keep id and created_at, bump version.

    `if_match` is the versions the client accepts (from If-Match; "*" accepts any), or None for no condition.
    """
    conn = engine.db.connection()
    with engine.db.snapshot():
        current = documents.get_document_detail(conn, doc_id)
    _check_note(current["doc_type"], current["version"], doc_id, if_match)
    new_text = text if text is not None else str(current["content"])
    new_title = title if title is not None else str(current["title"])
    if title is None and text is not None and current["title"] == documents.derive_title(str(current["content"])):
        new_title = documents.derive_title(text)  # the title was derived from the old text: derive it anew
    prepared = prepare(engine, new_title, new_text, "note")
    with engine.write_lock:
        with engine.db.write() as conn:
            row = documents.require_document(conn, doc_id)
            # Checked again under the lock: the version may have moved while we were embedding.
            _check_note(row["doc_type"], row["version"], doc_id, if_match)
            now = now_iso()
            old_chunk_ids = documents.delete_chunks(conn, doc_id)
            documents.update_note(conn, doc_id, new_title, new_text, now)
            chunk_ids = documents.insert_chunks(conn, doc_id, new_title, prepared.texts)
            _store_vectors(conn, chunk_ids, prepared.vectors)
            jobs.record_finished_update(conn, doc_id, now)
        if engine.vectors is not None:
            engine.vectors.remove(old_chunk_ids)
        _index_vectors(engine, chunk_ids, doc_id, prepared.vectors)
    with engine.db.snapshot():
        return documents.get_document(conn, doc_id)


def delete_document(engine: Engine, doc_id: int) -> None:
    with engine.write_lock:
        with engine.db.write() as conn:
            chunk_ids = documents.delete_document(conn, doc_id)
        if engine.vectors is not None:
            engine.vectors.remove(chunk_ids)


def backfill_vectors(engine: Engine, embedder: Embedder, limit: int) -> int:
    """Embed up to `limit` chunks that have no vector (stored before the model was available)."""
    rows = documents.chunks_without_vectors(engine.db.connection(), limit)
    if not rows:
        return 0
    vectors = embed(engine, embedder, [(row[2], row[3]) for row in rows], None)
    with engine.write_lock:
        with engine.db.write() as conn:
            alive = documents.existing_chunk_ids(conn, [row[0] for row in rows])
            keep = [i for i, row in enumerate(rows) if row[0] in alive]
            _store_vectors(conn, [rows[i][0] for i in keep], vectors[keep])
        if engine.vectors is not None and keep:
            engine.vectors.add([rows[i][0] for i in keep], [rows[i][1] for i in keep], vectors[keep])
    return len(rows)


def _check_note(doc_type: object, version: object, doc_id: int, if_match: Collection[str] | None) -> None:
    if doc_type != "note":
        raise NotANote(f"document {doc_id} is a {doc_type} file, not a note; only notes can be edited")
    if if_match is not None and "*" not in if_match and str(version) not in if_match:
        wanted = ", ".join(sorted(if_match)) or "none"
        raise PreconditionFailed(f"document {doc_id} is at version {version}; If-Match asked for {wanted}")


def _store_vectors(conn: sqlite3.Connection, chunk_ids: Sequence[int], vectors: np.ndarray | None) -> None:
    if vectors is None or not len(chunk_ids):
        return
    from .vectors import to_blob

    documents.store_vectors(conn, ((cid, to_blob(vec)) for cid, vec in zip(chunk_ids, vectors, strict=True)))


def _index_vectors(engine: Engine, chunk_ids: Sequence[int], doc_id: int, vectors: np.ndarray | None) -> None:
    if engine.vectors is not None and vectors is not None:
        engine.vectors.add(chunk_ids, [doc_id] * len(chunk_ids), vectors)
