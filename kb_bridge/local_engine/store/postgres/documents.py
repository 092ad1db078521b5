"""SQL for documents, chunks, tags and vectors on PostgreSQL. Plain functions over a connection; callers own
the transaction (PostgresStore). They return the API's JSON objects, exactly as store/sqlite/documents.py does,
whose functions share these names and signatures (../sql_reads.py and ../sql_writes.py call either).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import NotFound
from ..base import DocumentFilter, NewDocument, Original, text_sha256
from ..tag_counts import count_tagged, tags_alone
from .index_log import tags_of

if TYPE_CHECKING:
    import numpy as np

_DOCUMENT_COLUMNS = """d.id, d.title, d.doc_type, d.source_path, d.size_bytes, d.sha256, d.version,
    d.created_at, d.updated_at, d.changed_by, (SELECT COUNT(*) FROM chunks c WHERE c.document_id = d.id) AS chunk_count"""


def dicts(conn: Any, sql: str, params: Sequence[object] | dict[str, object] = ()) -> list[dict[str, Any]]:
    from psycopg.rows import dict_row

    with conn.cursor(row_factory=dict_row) as cursor:
        return list(cursor.execute(sql, params).fetchall())


def where_sql(where: DocumentFilter, alias: str = "d") -> tuple[str, list[object]]:
    """A WHERE clause (or TRUE) over documents aliased `alias` for a filter, and its parameters."""
    clauses: list[str] = []
    params: list[object] = []
    for tag in where.tags:
        clauses.append(f"EXISTS (SELECT 1 FROM document_tags t WHERE t.document_id = {alias}.id AND t.tag = %s)")
        params.append(tag)
    for column, value, operator in (("doc_type", where.doc_type, "="), ("source_path", where.source_path, "=")):
        if value is not None:
            clauses.append(f"{alias}.{column} {operator} %s")
            params.append(value)
    for column, operator, bound in where.time_bounds():
        clauses.append(f"{alias}.{column} {operator} %s")
        params.append(bound)
    return (" AND ".join(clauses) or "TRUE"), params


def _document(row: dict[str, Any], tags: list[str]) -> dict[str, object]:
    return {"id": row["id"], "title": row["title"], "doc_type": row["doc_type"], "source_path": row["source_path"],
            "tags": tags, "chunk_count": row["chunk_count"], "size_bytes": row["size_bytes"], "sha256": row["sha256"],
            "version": row["version"], "created_at": row["created_at"], "updated_at": row["updated_at"],
            "changed_by": row["changed_by"]}


def get_document(conn: Any, doc_id: int) -> dict[str, object]:
    rows = dicts(conn, f"SELECT {_DOCUMENT_COLUMNS} FROM documents d WHERE d.id = %s", (doc_id,))
    if not rows:
        raise NotFound(f"document {doc_id} not found")
    return _document(rows[0], tags_of(conn, [doc_id])[doc_id])


def get_document_detail(conn: Any, doc_id: int) -> dict[str, object]:
    document = get_document(conn, doc_id)
    content = conn.execute("SELECT text FROM document_content WHERE document_id = %s", (doc_id,)).fetchone()
    document["content"] = content[0] if content else ""
    document["chunks"] = [{"id": r[0], "index": r[1], "text": r[2]} for r in conn.execute(
        "SELECT id, chunk_index, text FROM chunks WHERE document_id = %s ORDER BY chunk_index", (doc_id,))]
    return document


def list_documents(conn: Any, where: DocumentFilter, limit: int, offset: int,
                   after: tuple[str, int] | None = None) -> tuple[list[dict[str, object]], int]:
    clause, params = where_sql(where)
    if tags_alone(where):
        total = count_tagged(conn, where.tags, "%s")
    else:
        total = conn.execute(f"SELECT COUNT(*) FROM documents d WHERE {clause}", params).fetchone()[0]
    if after is not None:
        # Strictly after the key in the listing's order (the same collation as ORDER BY, so they agree).
        clause += " AND (d.updated_at, d.id) < (%s, %s)"
        params = [*params, *after]
    rows = dicts(conn, f"SELECT {_DOCUMENT_COLUMNS} FROM documents d WHERE {clause} "
                       "ORDER BY d.updated_at DESC, d.id DESC LIMIT %s OFFSET %s", [*params, limit, offset])
    tags = tags_of(conn, [row["id"] for row in rows])
    return [_document(row, tags[row["id"]]) for row in rows], int(total)


def matching_document_ids(conn: Any, where: DocumentFilter) -> list[int]:
    clause, params = where_sql(where)
    return [int(r[0]) for r in conn.execute(f"SELECT d.id FROM documents d WHERE {clause}", params)]


def insert_documents(conn: Any, items: Sequence[NewDocument], now: str) -> list[int]:
    """Insert documents with their content and tags; returns their ids in order."""
    ids: list[int] = []
    for new in items:
        doc_id = conn.execute(
            "INSERT INTO documents (title, doc_type, source_path, size_bytes, sha256, version, created_at, updated_at, changed_by) "
            "VALUES (%s, %s, %s, %s, %s, 1, %s, %s, %s) RETURNING id",
            (new.title, new.doc_type, new.source_path, new.size_bytes, new.sha256, new.created_at or now,
             new.updated_at or new.created_at or now, new.changed_by),
        ).fetchone()[0]
        ids.append(int(doc_id))
    with conn.cursor() as cursor:
        cursor.executemany("INSERT INTO document_content (document_id, text) VALUES (%s, %s)",
                           [(doc_id, new.content) for doc_id, new in zip(ids, items, strict=True)])
        cursor.executemany("INSERT INTO document_tags (document_id, tag) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                           [(doc_id, tag) for doc_id, new in zip(ids, items, strict=True) for tag in set(new.tags)])
    return ids


def insert_chunks(conn: Any, doc_id: int, title: str, texts: Sequence[str]) -> list[int]:
    """Insert a document's chunks 0..n-1 in one statement; returns their ids in order."""
    if not texts:
        return []
    rows = conn.execute(
        "INSERT INTO chunks (document_id, chunk_index, title, text, text_sha256) "
        "SELECT %s, i - 1, %s, t, s FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS u(t, s, i) "
        "ORDER BY i RETURNING id, chunk_index",
        (doc_id, title, list(texts), [text_sha256(text) for text in texts]),
    ).fetchall()
    return [int(r[0]) for r in sorted(rows, key=lambda r: r[1])]


def has_vectors(conn: Any) -> bool:
    """Whether the vector table exists (it is made when a model is first used: schema.vector_table)."""
    return conn.execute("SELECT to_regclass('embeddings')").fetchone()[0] is not None


def vector_total(conn: Any) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0])


def vector_literal(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"


def parse_vector(text: str) -> np.ndarray:
    import numpy as np

    return np.asarray([float(x) for x in text.strip("[]").split(",")], dtype=np.float32)


def store_vectors(conn: Any, chunk_ids: Sequence[int], vectors: np.ndarray | None) -> None:
    if vectors is None or not len(chunk_ids):
        return
    if not has_vectors(conn):
        return  # no model has been used yet: the worker embeds these chunks once one is
    with conn.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO embeddings (chunk_id, vector) VALUES (%s, %s::halfvec) "
            "ON CONFLICT (chunk_id) DO UPDATE SET vector = EXCLUDED.vector",
            [(chunk_id, vector_literal(vec)) for chunk_id, vec in zip(chunk_ids, vectors, strict=True)],
        )


def use_model(conn: Any, identity: str) -> str | None:
    """Record that stored vectors are `identity`'s; vectors another model made are dropped, and its
    identity returned (None when there were none or they were this model's)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
    dropped = row[0] if row is not None and row[0] != identity else None
    if dropped is not None:
        conn.execute("TRUNCATE embeddings")
    conn.execute("INSERT INTO meta VALUES ('embedding_model', %s) ON CONFLICT (key) DO UPDATE "
                 "SET value = EXCLUDED.value", (identity,))
    return dropped


def stored_vectors_by_text(conn: Any, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], bytes]:
    """Float32 vectors (little-endian bytes) already made for chunks with exactly this (title, text sha256)."""
    wanted = set(keys)
    if not wanted or not has_vectors(conn):
        return {}
    rows = conn.execute(
        "SELECT DISTINCT ON (c.title, c.text_sha256) c.title, c.text_sha256, e.vector::text FROM chunks c "
        "JOIN embeddings e ON e.chunk_id = c.id WHERE c.text_sha256 = ANY(%s)",
        (sorted({sha for _, sha in wanted}),),
    ).fetchall()
    return {(r[0], r[1]): parse_vector(r[2]).astype("<f4").tobytes() for r in rows if (r[0], r[1]) in wanted}


def chunks_without_vectors(conn: Any, limit: int) -> list[tuple[int, int, str, str]]:
    if not has_vectors(conn):
        return []
    return [(int(r[0]), int(r[1]), str(r[2]), str(r[3])) for r in conn.execute(
        "SELECT c.id, c.document_id, c.title, c.text FROM chunks c LEFT JOIN embeddings e ON e.chunk_id = c.id "
        "WHERE e.chunk_id IS NULL ORDER BY c.id LIMIT %s", (limit,))]


def existing_chunk_ids(conn: Any, chunk_ids: Sequence[int]) -> set[int]:
    return {int(r[0]) for r in conn.execute("SELECT id FROM chunks WHERE id = ANY(%s)", (list(chunk_ids),))}


def chunk_ids_of(conn: Any, doc_id: int) -> list[int]:
    return [int(r[0]) for r in conn.execute("SELECT id FROM chunks WHERE document_id = %s", (doc_id,))]


def require_document(conn: Any, doc_id: int) -> dict[str, Any]:
    """The document's row, locked for this transaction's update, or NotFound."""
    rows = dicts(conn, "SELECT id, doc_type, title, version FROM documents WHERE id = %s FOR UPDATE", (doc_id,))
    if not rows:
        raise NotFound(f"document {doc_id} not found")
    return rows[0]


def update_note(conn: Any, doc_id: int, title: str, content: str, now: str, changed_by: str | None = None) -> None:
    data = content.encode("utf-8")
    conn.execute("UPDATE documents SET title = %s, size_bytes = %s, sha256 = %s, version = version + 1, "
                 "updated_at = %s, changed_by = %s WHERE id = %s",
                 (title, len(data), hashlib.sha256(data).hexdigest(), now, changed_by, doc_id))
    conn.execute("UPDATE document_content SET text = %s WHERE document_id = %s", (content, doc_id))


def move_document(conn: Any, doc_id: int, source_path: str | None, title: str | None, now: str) -> None:
    """Give the document a new source_path and/or title in place: same id, chunks and vectors (the title's
    copies on the chunks change with it, so the full-text index follows through the change log)."""
    if source_path is not None:
        conn.execute("UPDATE documents SET source_path = %s WHERE id = %s", (source_path, doc_id))
    if title is not None:
        # Whoever made the text did not make this title; a move names no one (changed_by: unknown).
        conn.execute("UPDATE documents SET title = %s, changed_by = CASE WHEN title = %s THEN changed_by END "
                     "WHERE id = %s", (title, title, doc_id))
        conn.execute("UPDATE chunks SET title = %s WHERE document_id = %s AND title <> %s", (title, doc_id, title))
    conn.execute("UPDATE documents SET version = version + 1, updated_at = %s WHERE id = %s", (now, doc_id))


def delete_chunks(conn: Any, doc_id: int) -> None:
    conn.execute("DELETE FROM chunks WHERE document_id = %s", (doc_id,))


def delete_document(conn: Any, doc_id: int) -> None:
    require_document(conn, doc_id)
    delete_chunks(conn, doc_id)
    conn.execute("DELETE FROM documents WHERE id = %s", (doc_id,))


def change_tags(conn: Any, doc_id: int, add: Sequence[str], remove: Sequence[str], now: str) -> dict[str, object]:
    """Remove then add tags; one version step if anything changed (the row is locked by require_document)."""
    changed = 0
    for tag in remove:
        changed += conn.execute("DELETE FROM document_tags WHERE document_id = %s AND tag = %s", (doc_id, tag)).rowcount
    for tag in add:
        changed += conn.execute("INSERT INTO document_tags (document_id, tag) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                                (doc_id, tag)).rowcount
    if changed:
        conn.execute("UPDATE documents SET version = version + 1, updated_at = %s WHERE id = %s", (now, doc_id))
    return tag_state(conn, doc_id)


def tag_state(conn: Any, doc_id: int) -> dict[str, object]:
    version = conn.execute("SELECT version FROM documents WHERE id = %s", (doc_id,)).fetchone()[0]
    return {"id": doc_id, "tags": tags_of(conn, [doc_id])[doc_id], "version": version}


def list_tags(conn: Any, prefix: str | None, within: str | None = None) -> list[dict[str, object]]:
    sql = "SELECT t.tag, COUNT(*) FROM document_tags t"
    params: list[object] = []
    if within:
        sql += " JOIN document_tags w ON w.document_id = t.document_id AND w.tag = %s"
        params.append(within)
    if prefix:
        sql += " WHERE left(t.tag, %s) = %s"
        params += [len(prefix), prefix]
    # By name in code points, as SQLite and every document's `tags` list them (index_log.tags_of).
    rows = conn.execute(sql + ' GROUP BY t.tag ORDER BY t.tag COLLATE "C"', params)
    return [{"name": r[0], "documents": int(r[1])} for r in rows]


def chunk_texts(conn: Any, chunk_ids: Sequence[int]) -> dict[int, str]:
    """The text of each of these chunks by id; ids that no longer exist are absent."""
    rows = conn.execute("SELECT id, text FROM chunks WHERE id = ANY(%s)", (list(chunk_ids),)).fetchall()
    return {int(chunk_id): str(text) for chunk_id, text in rows}


def get_chunks(conn: Any, chunk_ids: Sequence[int]) -> dict[int, dict[str, object]]:
    rows = dicts(conn, "SELECT c.id, c.document_id, c.chunk_index, c.text, d.title, d.source_path, d.doc_type, "
                       "d.created_at, d.updated_at FROM chunks c JOIN documents d ON d.id = c.document_id "
                       "WHERE c.id = ANY(%s)", (list(chunk_ids),))
    tags = tags_of(conn, [row["document_id"] for row in rows])
    return {row["id"]: {"chunk_id": row["id"], "document_id": row["document_id"], "chunk_index": row["chunk_index"],
                        "text": row["text"], "score": None, "title": row["title"], "source_path": row["source_path"],
                        "doc_type": row["doc_type"], "tags": tags[row["document_id"]], "created_at": row["created_at"],
                        "updated_at": row["updated_at"]} for row in rows}


def counts(conn: Any) -> dict[str, int]:
    total, notes = conn.execute("SELECT COUNT(*), COUNT(*) FILTER (WHERE doc_type = 'note') FROM documents").fetchone()
    chunks = conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    return {"documents": int(total), "notes": int(notes), "files": int(total - notes), "chunks": int(chunks)}


# Bytes per read of an original: constant memory for any size.
_PIECE = 1024 * 1024


def store_original_from_upload(conn: Any, doc_id: int, job_id: int, original: Original) -> None:
    """Keep the job's uploaded bytes (already in job_uploads) with its document: copied inside the database."""
    conn.execute(
        "INSERT INTO originals (document_id, filename, content_type, size, data) "
        "SELECT %s, %s, %s, COALESCE(SUM(length(data)), 0), COALESCE(string_agg(data, ''::bytea ORDER BY part), ''::bytea) "
        "FROM job_uploads WHERE job_id = %s "
        "ON CONFLICT (document_id) DO UPDATE SET filename = EXCLUDED.filename, content_type = EXCLUDED.content_type, "
        "size = EXCLUDED.size, data = EXCLUDED.data",
        (doc_id, original.filename, original.content_type, job_id),
    )


def read_original(conn: Any, doc_id: int) -> tuple[str | None, str, int] | None:
    row = conn.execute("SELECT filename, content_type, size FROM originals WHERE document_id = %s", (doc_id,)).fetchone()
    return (row[0], row[1], int(row[2])) if row is not None else None


def original_pieces(conn: Any, doc_id: int, size: int) -> Iterator[bytes]:
    for start in range(0, size, _PIECE):
        row = conn.execute("SELECT substring(data FROM %s FOR %s) FROM originals WHERE document_id = %s",
                           (start + 1, _PIECE, doc_id)).fetchone()
        if row is None:
            return  # deleted meanwhile: the stream ends short
        yield bytes(row[0])


def chunks_after(conn: Any, after: int, limit: int) -> list[tuple[int, int, str, str]]:
    """(chunk_id, document_id, title, text) of the chunks whose id is above `after`, in id order."""
    return [(int(r[0]), int(r[1]), str(r[2]), str(r[3])) for r in conn.execute(
        "SELECT id, document_id, title, text FROM chunks WHERE id > %s ORDER BY id LIMIT %s", (after, limit))]


def count_chunks_after(conn: Any, after: int) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM chunks WHERE id > %s", (after,)).fetchone()[0])


def read_meta(conn: Any, key: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = %s", (key,)).fetchone()
    return None if row is None else str(row[0])


def write_meta(conn: Any, key: str, value: str | None) -> None:
    if value is None:
        conn.execute("DELETE FROM meta WHERE key = %s", (key,))
    else:
        conn.execute("INSERT INTO meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                     (key, value))
