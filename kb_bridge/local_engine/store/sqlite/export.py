"""Reading a SQLite store whole, document by document, for `kb-bridge migrate` (cli/migrate.py).

Read-only: the database is opened with mode=ro, so a migration never changes the source, and it may run
while the engine is stopped or running (each batch is one consistent read).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

from ..base import StoredChunk, StoredDocument


def open_readonly(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    return conn


def embedding_identity(conn: sqlite3.Connection) -> str | None:
    """The model/dimension/input the stored vectors were made with (meta), or None."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
    return str(row[0]) if row else None


def totals(conn: sqlite3.Connection) -> dict[str, int]:
    return {name: int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
            for name, table in (("documents", "documents"), ("chunks", "chunks"), ("vectors", "embeddings"),
                                ("tags", "document_tags"))}


def documents_after(conn: sqlite3.Connection, after_id: int, limit: int) -> list[StoredDocument]:
    """Up to `limit` whole documents with ids above `after_id`, in id order, read in one transaction."""
    conn.execute("BEGIN")
    try:
        rows = conn.execute(
            "SELECT d.*, c.text AS content FROM documents d LEFT JOIN document_content c ON c.document_id = d.id "
            "WHERE d.id > ? ORDER BY d.id LIMIT ?", (after_id, limit)).fetchall()
        return [_document(conn, row) for row in rows]
    finally:
        conn.execute("COMMIT")


def _document(conn: sqlite3.Connection, row: sqlite3.Row) -> StoredDocument:
    tags = tuple(r[0] for r in conn.execute("SELECT tag FROM document_tags WHERE document_id = ? ORDER BY tag",
                                            (row["id"],)))
    chunks = tuple(StoredChunk(r["id"], r["chunk_index"], r["title"], r["text"], r["text_sha256"],
                               bytes(r["vector"]) if r["vector"] is not None else None)
                   for r in conn.execute(
                       "SELECT c.id, c.chunk_index, c.title, c.text, c.text_sha256, e.vector FROM chunks c "
                       "LEFT JOIN embeddings e ON e.chunk_id = c.id WHERE c.document_id = ? ORDER BY c.chunk_index",
                       (row["id"],)))
    return StoredDocument(id=row["id"], title=row["title"], doc_type=row["doc_type"], source_path=row["source_path"],
                          size_bytes=row["size_bytes"], sha256=row["sha256"], version=row["version"],
                          created_at=row["created_at"], updated_at=row["updated_at"] or row["created_at"],
                          content=row["content"] or "", tags=tags, chunks=chunks, original=_original(conn, row["id"]))


def _original(conn: sqlite3.Connection, document_id: int) -> tuple[str | None, str, bytes] | None:
    """The uploaded file's bytes, on a store that keeps them (schema 4, engine 3.6)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'originals'").fetchone() is None:
        return None
    row = conn.execute("SELECT filename, content_type, data FROM originals WHERE document_id = ?", (document_id,)).fetchone()
    return (row[0], row[1], bytes(row[2])) if row is not None else None


def all_documents(conn: sqlite3.Connection, batch: int = 200) -> Iterator[list[StoredDocument]]:
    after = 0
    while documents := documents_after(conn, after, batch):
        yield documents
        after = documents[-1].id
