"""SQL for documents, their chunks, tags and stored vectors. Plain functions over a connection.

Callers own the transaction (SqliteStore's db.write() / db.snapshot()); nothing here commits. Functions
return the API's JSON objects (dicts).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from ...errors import NotFound
from ..base import DocumentFilter, NewDocument, Original, text_sha256
from ..tag_counts import count_tagged, tags_alone
from .db import in_parts

if TYPE_CHECKING:
    import numpy as np

_DOCUMENT_COLUMNS = """d.id, d.title, d.doc_type, d.source_path, d.size_bytes, d.sha256, d.version,
    d.created_at, d.updated_at, d.changed_by, (SELECT COUNT(*) FROM chunks c WHERE c.document_id = d.id) AS chunk_count"""


# Fewer documents than this are read in full from an index of the filter's and sorted (`driving_tag`,
# `list_documents`); when more match, walking the documents in the order asked for stops sooner.
FEW_DOCUMENTS = 10_000


def where_sql(where: DocumentFilter, alias: str = "d", driving_tag: str | None = None) -> tuple[str, list[object]]:
    """A WHERE clause (or "1") over documents aliased `alias` for a filter, and its parameters.

    Each tag is a lookup in document_tags' primary key for the row at hand, except `driving_tag`, which is the
    list of its documents read from the tag's index: SQLite's planner then starts from that list.
    """
    clauses: list[str] = []
    params: list[object] = []
    for tag in where.tags:
        if tag == driving_tag:
            clauses.append(f"{alias}.id IN (SELECT document_id FROM document_tags WHERE tag = ?)")
        else:
            clauses.append(f"EXISTS (SELECT 1 FROM document_tags t WHERE t.document_id = {alias}.id AND t.tag = ?)")
        params.append(tag)
    for column, value, operator in (
        ("doc_type", where.doc_type, "="),
        ("source_path", where.source_path, "="),
    ):
        if value is not None:
            clauses.append(f"{alias}.{column} {operator} ?")
            params.append(value)
    for column, operator, bound in where.time_bounds():
        clauses.append(f"{alias}.{column} {operator} ?")
        params.append(bound)
    return (" AND ".join(clauses) or "1"), params


def _document(row: sqlite3.Row, tags: list[str]) -> dict[str, object]:
    return {
        "id": row["id"],
        "title": row["title"],
        "doc_type": row["doc_type"],
        "source_path": row["source_path"],
        "tags": tags,
        "chunk_count": row["chunk_count"],
        "size_bytes": row["size_bytes"],
        "sha256": row["sha256"],
        "version": row["version"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"] or row["created_at"],
        "changed_by": row["changed_by"],
    }


def tags_of(conn: sqlite3.Connection, document_ids: Iterable[int]) -> dict[int, list[str]]:
    """Sorted tags per document id (every asked id is present, possibly with [])."""
    ids = sorted(set(document_ids))
    result: dict[int, list[str]] = {doc_id: [] for doc_id in ids}
    for part, marks in in_parts(ids):
        rows = conn.execute(
            f"SELECT document_id, tag FROM document_tags WHERE document_id IN ({marks}) ORDER BY tag",
            part,
        )
        for doc_id, tag in rows:
            result[doc_id].append(tag)
    return result


def get_document(conn: sqlite3.Connection, doc_id: int) -> dict[str, object]:
    row = conn.execute(f"SELECT {_DOCUMENT_COLUMNS} FROM documents d WHERE d.id = ?", (doc_id,)).fetchone()
    if row is None:
        raise NotFound(f"document {doc_id} not found")
    return _document(row, tags_of(conn, [doc_id])[doc_id])


def get_document_detail(conn: sqlite3.Connection, doc_id: int) -> dict[str, object]:
    """The document with its full `content` and its `chunks`."""
    document = get_document(conn, doc_id)
    content = conn.execute("SELECT text FROM document_content WHERE document_id = ?", (doc_id,)).fetchone()
    document["content"] = content[0] if content else ""
    document["chunks"] = [
        {"id": row[0], "index": row[1], "text": row[2]}
        for row in conn.execute(
            "SELECT id, chunk_index, text FROM chunks WHERE document_id = ? ORDER BY chunk_index", (doc_id,)
        )
    ]
    return document


def driving_tag(conn: sqlite3.Connection, where: DocumentFilter) -> str | None:
    """The filter's tag held by the fewest documents, if fewer than FEW_DOCUMENTS (counted up to that).

    SQLite's planner knows no tag's count: for a tag filter it walked every document (or chunk) and looked
    the tag up for each, 250-370 ms a search among a million chunks for a tag of 419 notes, 0.2 ms from the
    tag's index (docs/benchmarks.md, "Memory beside a million chunks of files"). For a tag most
    documents hold, walking them in the order asked is faster (a page of the newest stops early).
    """
    counted: list[tuple[int, str]] = []
    for tag in where.tags:
        (held,) = conn.execute("SELECT count(*) FROM (SELECT 1 FROM document_tags WHERE tag = ? LIMIT ?)",
                               (tag, FEW_DOCUMENTS)).fetchone()
        if held < FEW_DOCUMENTS:
            counted.append((int(held), tag))
    return min(counted)[1] if counted else None


def _reading_sql(conn: sqlite3.Connection, where: DocumentFilter) -> tuple[str, list[object]]:
    """`where_sql` for a read of every document (or chunk) the filter allows: from its rarest tag's list."""
    return where_sql(where, driving_tag=driving_tag(conn, where))


def list_documents(
    conn: sqlite3.Connection, where: DocumentFilter, limit: int, offset: int, after: tuple[str, int] | None = None
) -> tuple[list[dict[str, object]], int]:
    rarest = driving_tag(conn, where)
    clause, params = where_sql(where, driving_tag=rarest)
    if tags_alone(where):
        total = count_tagged(conn, sorted(where.tags, key=lambda tag: tag != rarest), "?")
    else:
        total = conn.execute(f"SELECT COUNT(*) FROM documents d WHERE {clause}", params).fetchone()[0]
    # The planner walks the newest first, checking the filter on each document, which stops early when many
    # match. When few do, "+" keeps that index out so that the filter's own index finds them: a time bound
    # that none of a million documents met took 414 ms walking them all, 0.1 ms so.
    few = total < FEW_DOCUMENTS
    order = "+d.updated_at DESC, +d.id DESC" if few else "d.updated_at DESC, d.id DESC"
    if after is not None:
        # Strictly after the key in that order; when many match, the (updated_at, id) index starts there.
        clause += " AND (+d.updated_at, +d.id) < (?, ?)" if few else " AND (d.updated_at, d.id) < (?, ?)"
        params = [*params, *after]
    rows = conn.execute(
        f"SELECT {_DOCUMENT_COLUMNS} FROM documents d WHERE {clause} ORDER BY {order} LIMIT ? OFFSET ?",
        [*params, limit, offset],
    ).fetchall()
    tags = tags_of(conn, [row["id"] for row in rows])
    return [_document(row, tags[row["id"]]) for row in rows], total


def matching_document_ids(conn: sqlite3.Connection, where: DocumentFilter) -> list[int]:
    clause, params = _reading_sql(conn, where)
    return [row[0] for row in conn.execute(f"SELECT d.id FROM documents d WHERE {clause}", params)]


def matching_chunk_ids(conn: sqlite3.Connection, where: DocumentFilter) -> list[int]:
    clause, params = _reading_sql(conn, where)
    return [row[0] for row in conn.execute(
        f"SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id WHERE {clause}", params)]


def insert_document(conn: sqlite3.Connection, new: NewDocument, now: str) -> int:
    cursor = conn.execute(
        "INSERT INTO documents (title, doc_type, source_path, size_bytes, sha256, version, created_at, updated_at, changed_by) "
        "VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?)",
        (new.title, new.doc_type, new.source_path, new.size_bytes, new.sha256, new.created_at or now,
         new.updated_at or new.created_at or now, new.changed_by),
    )
    doc_id = int(cursor.lastrowid or 0)
    conn.execute("INSERT INTO document_content (document_id, text) VALUES (?, ?)", (doc_id, new.content))
    conn.executemany(
        "INSERT OR IGNORE INTO document_tags (document_id, tag) VALUES (?, ?)", [(doc_id, t) for t in new.tags]
    )
    return doc_id


def insert_chunks(conn: sqlite3.Connection, doc_id: int, title: str, texts: Sequence[str]) -> list[int]:
    """Insert chunks in order (the index_log triggers record them). Returns their ids."""
    ids = []
    for index, text in enumerate(texts):
        cursor = conn.execute(
            "INSERT INTO chunks (document_id, chunk_index, title, text, text_sha256) VALUES (?, ?, ?, ?, ?)",
            (doc_id, index, title, text, text_sha256(text)),
        )
        ids.append(int(cursor.lastrowid or 0))
    return ids


def chunk_ids_of(conn: sqlite3.Connection, doc_id: int) -> list[int]:
    return [row[0] for row in conn.execute("SELECT id FROM chunks WHERE document_id = ?", (doc_id,))]


def delete_chunks(conn: sqlite3.Connection, doc_id: int) -> list[int]:
    ids = chunk_ids_of(conn, doc_id)
    conn.execute("DELETE FROM chunks WHERE document_id = ?", (doc_id,))
    return ids


def store_vectors(conn: sqlite3.Connection, chunk_ids: Sequence[int], vectors: np.ndarray | None) -> None:
    if vectors is None or not len(chunk_ids):
        return
    from ..vector_index import to_blob

    conn.executemany("INSERT OR REPLACE INTO embeddings (chunk_id, vector) VALUES (?, ?)",
                     ((cid, to_blob(vec)) for cid, vec in zip(chunk_ids, vectors, strict=True)))


def use_model(conn: sqlite3.Connection, identity: str) -> str | None:
    """Record that stored vectors are `identity`'s; vectors another model made are dropped, and its
    identity returned (None when there were none or they were this model's)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
    dropped = row[0] if row is not None and row[0] != identity else None
    if dropped is not None:
        conn.execute("DELETE FROM embeddings")
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('embedding_model', ?)", (identity,))
    return dropped


def stored_vectors_by_text(conn: sqlite3.Connection, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], bytes]:
    """Vectors already computed for chunks with exactly this (title, text sha256): the model read the same
    input for them (re-uploads and edited notes reuse them)."""
    wanted = set(keys)
    shas = sorted({sha for _, sha in wanted})
    found: dict[tuple[str, str], bytes] = {}
    for part, marks in in_parts(shas):
        rows = conn.execute(
            "SELECT c.title, c.text_sha256, e.vector FROM chunks c JOIN embeddings e ON e.chunk_id = c.id "
            f"WHERE c.text_sha256 IN ({marks}) GROUP BY c.title, c.text_sha256",
            part,
        )
        found.update(((row[0], row[1]), row[2]) for row in rows if (row[0], row[1]) in wanted)
    return found


def chunks_without_vectors(conn: sqlite3.Connection, limit: int) -> list[tuple[int, int, str, str]]:
    """(chunk_id, document_id, title, text) of chunks that have no vector yet, oldest first."""
    return conn.execute(
        "SELECT c.id, c.document_id, c.title, c.text FROM chunks c LEFT JOIN embeddings e ON e.chunk_id = c.id "
        "WHERE e.chunk_id IS NULL ORDER BY c.id LIMIT ?",
        (limit,),
    ).fetchall()


def existing_chunk_ids(conn: sqlite3.Connection, chunk_ids: Sequence[int]) -> set[int]:
    found: set[int] = set()
    for part, marks in in_parts(chunk_ids):
        found.update(row[0] for row in conn.execute(f"SELECT id FROM chunks WHERE id IN ({marks})", part))
    return found


def require_document(conn: sqlite3.Connection, doc_id: int) -> sqlite3.Row:
    """The document's row for an update (inside a write transaction), or NotFound."""
    row = conn.execute("SELECT id, doc_type, title, version FROM documents WHERE id = ?", (doc_id,)).fetchone()
    if row is None:
        raise NotFound(f"document {doc_id} not found")
    return row


def update_note(
    conn: sqlite3.Connection, doc_id: int, title: str, content: str, now: str, changed_by: str | None = None
) -> None:
    data = content.encode("utf-8")
    conn.execute(
        "UPDATE documents SET title = ?, size_bytes = ?, sha256 = ?, version = version + 1, updated_at = ?, "
        "changed_by = ? WHERE id = ?",
        (title, len(data), hashlib.sha256(data).hexdigest(), now, changed_by, doc_id),
    )
    conn.execute("UPDATE document_content SET text = ? WHERE document_id = ?", (content, doc_id))


def move_document(conn: sqlite3.Connection, doc_id: int, source_path: str | None, title: str | None,
                  now: str) -> None:
    """Give the document a new source_path and/or title in place: same id, chunks and vectors (the title's
    copies on the chunks change with it, so the full-text index follows through the change log)."""
    if source_path is not None:
        conn.execute("UPDATE documents SET source_path = ? WHERE id = ?", (source_path, doc_id))
    if title is not None:
        # Whoever made the text did not make this title; a move names no one (changed_by: unknown).
        conn.execute("UPDATE documents SET title = ?, changed_by = CASE WHEN title = ? THEN changed_by END "
                     "WHERE id = ?", (title, title, doc_id))
        conn.execute("UPDATE chunks SET title = ? WHERE document_id = ? AND title <> ?", (title, doc_id, title))
    _bump_version(conn, doc_id, now)


def delete_document(conn: sqlite3.Connection, doc_id: int) -> list[int]:
    """Delete the document and everything hanging off it (cascades); returns the removed chunk ids."""
    require_document(conn, doc_id)
    chunk_ids = delete_chunks(conn, doc_id)
    conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,))
    return chunk_ids


def change_tags(
    conn: sqlite3.Connection, doc_id: int, add: Sequence[str], remove: Sequence[str], now: str
) -> dict[str, object]:
    """Remove then add tags in the caller's transaction; one version step if anything changed. Removing a
    tag the document lacks, or adding one it has, changes nothing."""
    changed = 0
    for tag in remove:
        changed += conn.execute("DELETE FROM document_tags WHERE document_id = ? AND tag = ?", (doc_id, tag)).rowcount
    for tag in add:
        changed += conn.execute(
            "INSERT OR IGNORE INTO document_tags (document_id, tag) VALUES (?, ?)", (doc_id, tag)
        ).rowcount
    if changed:
        _bump_version(conn, doc_id, now)
    return tag_state(conn, doc_id)


def list_tags(conn: sqlite3.Connection, prefix: str | None, within: str | None = None) -> list[dict[str, object]]:
    sql = "SELECT t.tag, COUNT(*) FROM document_tags t"
    params: list[object] = []
    if within:
        sql += " JOIN document_tags w ON w.document_id = t.document_id AND w.tag = ?"
        params.append(within)
    if prefix:
        sql += " WHERE substr(t.tag, 1, ?) = ?"
        params += [len(prefix), prefix]
    rows = conn.execute(sql + " GROUP BY t.tag ORDER BY t.tag", params)
    return [{"name": row[0], "documents": row[1]} for row in rows]


def chunk_texts(conn: sqlite3.Connection, chunk_ids: Sequence[int]) -> dict[int, str]:
    """The text of each of these chunks by id; ids that no longer exist are absent."""
    found: dict[int, str] = {}
    for part, marks in in_parts(chunk_ids):
        found.update((int(row[0]), str(row[1])) for row in conn.execute(
            f"SELECT id, text FROM chunks WHERE id IN ({marks})", part))
    return found


def get_chunks(conn: sqlite3.Connection, chunk_ids: Sequence[int]) -> dict[int, dict[str, object]]:
    """Chunk objects (score None) by id; ids that no longer exist are absent."""
    found: dict[int, dict[str, object]] = {}
    for part, marks in in_parts(chunk_ids):
        rows = conn.execute(
            "SELECT c.id, c.document_id, c.chunk_index, c.text, d.title, d.source_path, d.doc_type, "
            "d.created_at, d.updated_at FROM chunks c JOIN documents d ON d.id = c.document_id "
            f"WHERE c.id IN ({marks})",
            part,
        ).fetchall()
        tags = tags_of(conn, [row["document_id"] for row in rows])
        for row in rows:
            found[row["id"]] = {
                "chunk_id": row["id"],
                "document_id": row["document_id"],
                "chunk_index": row["chunk_index"],
                "text": row["text"],
                "score": None,
                "title": row["title"],
                "source_path": row["source_path"],
                "doc_type": row["doc_type"],
                "tags": tags[row["document_id"]],
                "created_at": row["created_at"],
                "updated_at": row["updated_at"] or row["created_at"],
            }
    return found


def get_chunk(conn: sqlite3.Connection, chunk_id: int) -> dict[str, object]:
    chunk = get_chunks(conn, [chunk_id]).get(chunk_id)
    if chunk is None:
        raise NotFound(f"chunk {chunk_id} not found")
    return chunk


def counts(conn: sqlite3.Connection) -> dict[str, int]:
    total, notes = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(doc_type = 'note'), 0) FROM documents"
    ).fetchone()
    chunks = conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    return {"documents": total, "notes": notes, "files": total - notes, "chunks": chunks}


def _bump_version(conn: sqlite3.Connection, doc_id: int, now: str) -> None:
    conn.execute("UPDATE documents SET version = version + 1, updated_at = ? WHERE id = ?", (now, doc_id))


def tag_state(conn: sqlite3.Connection, doc_id: int) -> dict[str, object]:
    version = conn.execute("SELECT version FROM documents WHERE id = ?", (doc_id,)).fetchone()[0]
    return {"id": doc_id, "tags": tags_of(conn, [doc_id])[doc_id], "version": version}


# Bytes moved per step between a staged file and an original's blob: constant memory for any size.
_BLOB_PIECE = 1024 * 1024


def store_original(conn: sqlite3.Connection, doc_id: int, original: Original) -> None:
    """Keep the uploaded file with its document, copied into the blob in pieces (incremental blob I/O)."""
    size = os.path.getsize(original.path)
    conn.execute(
        "INSERT OR REPLACE INTO originals (document_id, filename, content_type, size, data) VALUES (?, ?, ?, ?, zeroblob(?))",
        (doc_id, original.filename, original.content_type, size, size),
    )
    if size == 0:
        return
    # document_id is the INTEGER PRIMARY KEY, so it is the row id the blob is opened by.
    with open(original.path, "rb") as source, conn.blobopen("originals", "data", doc_id) as blob:
        while piece := source.read(_BLOB_PIECE):
            blob.write(piece)


def read_original(conn: sqlite3.Connection, doc_id: int) -> tuple[str | None, str, int] | None:
    row = conn.execute("SELECT filename, content_type, size FROM originals WHERE document_id = ?", (doc_id,)).fetchone()
    return (row[0], row[1], row[2]) if row is not None else None


def original_pieces(conn: sqlite3.Connection, doc_id: int, size: int) -> Iterator[bytes]:
    with conn.blobopen("originals", "data", doc_id, readonly=True) as blob:
        while piece := blob.read(_BLOB_PIECE):
            yield piece


def chunks_after(conn: sqlite3.Connection, after: int, limit: int) -> list[tuple[int, int, str, str]]:
    """(chunk_id, document_id, title, text) of the chunks whose id is above `after`, in id order."""
    return conn.execute("SELECT id, document_id, title, text FROM chunks WHERE id > ? ORDER BY id LIMIT ?",
                        (after, limit)).fetchall()


def count_chunks_after(conn: sqlite3.Connection, after: int) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM chunks WHERE id > ?", (after,)).fetchone()[0])


def read_meta(conn: sqlite3.Connection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def write_meta(conn: sqlite3.Connection, key: str, value: str | None) -> None:
    if value is None:
        conn.execute("DELETE FROM meta WHERE key = ?", (key,))
    else:
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))
