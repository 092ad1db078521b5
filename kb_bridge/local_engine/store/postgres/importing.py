"""Writing whole documents into the PostgreSQL store with their ids, versions and vectors, and a note's
history (its kept earlier versions, who changed it, its duplicate keys: engine 3.9), for `kb-bridge migrate`
(local_engine/migration.py). Idempotent: a document already there with its id is skipped, so an interrupted
migration is resumed by running it again; another document with that id is a clash (`sorted_out`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..base import StoredDocument
from . import schema
from .documents import vector_literal


def prepare(conn: Any, identity: str | None, dim: int | None) -> bool:
    """Make the vector table for `dim` and record which model made the vectors (so the engine keeps them).

    Into an empty database, the HNSW index is dropped here and built once at the end (`finish`): building
    it from all the vectors at once is many times faster than growing it row by row. Returns whether it was."""
    if identity is None or dim is None:
        return False
    with conn.transaction():
        schema.vector_table(conn, dim)
        conn.execute("INSERT INTO meta VALUES ('embedding_model', %s) ON CONFLICT (key) DO UPDATE "
                     "SET value = EXCLUDED.value", (identity,))
        empty = conn.execute("SELECT NOT EXISTS (SELECT 1 FROM embeddings)").fetchone()[0]
        if empty:
            conn.execute("DROP INDEX IF EXISTS embeddings_hnsw")
    return bool(empty)


def refusal(document: StoredDocument) -> str | None:
    """Why PostgreSQL cannot hold this document as it is, or None. Its text columns cannot hold U+0000, which
    an engine before 3.7 took into SQLite (the API refuses it now, on both stores)."""
    fields: list[tuple[str, object]] = [
        ("content", document.content), ("title", document.title), ("source_path", document.source_path),
        ("doc_type", document.doc_type), ("sha256", document.sha256), ("created_at", document.created_at),
        ("updated_at", document.updated_at), *(("tags", tag) for tag in document.tags),
        *(("chunk title", c.title) for c in document.chunks), *(("chunk text", c.text) for c in document.chunks),
        ("changed_by", document.changed_by),
        *((f"version {v.version}'s {name}", value) for v in document.versions
          for name, value in (("title", v.title), ("text", v.text), ("author", v.changed_by),
                              ("time", v.updated_at), *(("tag", tag) for tag in v.tags))),
        *(("duplicate key", part) for key in document.note_keys for part in key),
    ]
    if document.original is not None:
        fields += [("file name", document.original[0]), ("content type", document.original[1])]
    for name, value in fields:
        if isinstance(value, str) and "\x00" in value:
            return f"its {name} holds a NUL character (U+0000), which PostgreSQL text cannot store"
    return None


def refused_because(exc: BaseException) -> str:
    """A refused document's reason in words that quote none of its content (the server's message may)."""
    sqlstate = getattr(exc, "sqlstate", None)
    return f"PostgreSQL refused it ({type(exc).__name__}{f', SQLSTATE {sqlstate}' if sqlstate else ''})"


def sorted_out(conn: Any, documents: Sequence[StoredDocument]) -> tuple[list[StoredDocument], list[int]]:
    """The documents whose ids the target does not hold yet (to copy), and the ids it holds with another
    document (clashes). A document already there as copied (same type, content digest, version and creation
    time: a resumed run) is neither."""
    held = {int(r[0]): tuple(r[1:]) for r in conn.execute(
        "SELECT id, doc_type, sha256, version, created_at FROM documents WHERE id = ANY(%s)",
        ([d.id for d in documents],))}
    clashes = [d.id for d in documents if d.id in held and held[d.id] != (d.doc_type, d.sha256, d.version, d.created_at)]
    return [d for d in documents if d.id not in held], clashes


def write(conn: Any, documents: Sequence[StoredDocument], with_vectors: bool) -> None:
    """Insert these documents exactly as they are (call inside a write transaction)."""
    import numpy as np

    with conn.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO documents (id, title, doc_type, source_path, size_bytes, sha256, version, created_at, "
            "updated_at, changed_by) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [(d.id, d.title, d.doc_type, d.source_path, d.size_bytes, d.sha256, d.version, d.created_at, d.updated_at,
              d.changed_by) for d in documents])
        cursor.executemany("INSERT INTO document_content (document_id, text) VALUES (%s, %s)",
                           [(d.id, d.content) for d in documents])
        cursor.executemany("INSERT INTO document_tags (document_id, tag) VALUES (%s, %s)",
                           [(d.id, tag) for d in documents for tag in d.tags])
        cursor.executemany("INSERT INTO originals (document_id, filename, content_type, size, data) VALUES (%s, %s, %s, %s, %s)",
                           [(d.id, d.original[0], d.original[1], len(d.original[2]), d.original[2])
                            for d in documents if d.original is not None])
        cursor.executemany("INSERT INTO document_versions (document_id, version, title, text, tags, updated_at, "
                           "changed_by) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                           [(d.id, v.version, v.title, v.text, json.dumps(list(v.tags)), v.updated_at, v.changed_by)
                            for d in documents for v in d.versions])
        # Without the job that took it (jobs are not copied; migration.refuse_unfinished refuses a store with
        # jobs not done yet): a duplicate is answered with the document alone.
        # A key the target already holds (a note written there since) stays with that note.
        cursor.executemany("INSERT INTO note_keys (scope, text_key, job_id, document_id) VALUES (%s, %s, NULL, %s) "
                           "ON CONFLICT DO NOTHING",
                           [(scope, text_key, d.id) for d in documents for scope, text_key in d.note_keys])
        # COPY: a large store moves at tens of thousands of rows a second, where INSERTs manage a few thousand.
        with cursor.copy("COPY chunks (id, document_id, chunk_index, title, text, text_sha256) FROM STDIN") as copy:
            for d in documents:
                for c in d.chunks:
                    copy.write_row((c.id, d.id, c.index, c.title, c.text, c.text_sha256))
        if with_vectors:
            with cursor.copy("COPY embeddings (chunk_id, vector) FROM STDIN") as copy:
                for d in documents:
                    for c in d.chunks:
                        if c.vector is not None:
                            copy.write_row((c.id, vector_literal(np.frombuffer(c.vector, dtype="<f4"))))


def finish(conn: Any) -> None:
    """New ids continue after the copied ones; the vector index exists (built now if prepare dropped it)."""
    if conn.execute("SELECT to_regclass('embeddings')").fetchone()[0] is not None:
        # All the memory the build may use, for this transaction only (pgvector builds in memory when it fits).
        conn.execute("SET LOCAL maintenance_work_mem = '1GB'")
        conn.execute("SET LOCAL statement_timeout = 0")  # minutes at a million vectors
        conn.execute(schema.HNSW_INDEX)
    for table in ("documents", "chunks"):
        conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), MAX(id)) FROM {table} "
                     "HAVING MAX(id) IS NOT NULL")


def settle(conn: Any) -> None:
    """VACUUM (ANALYZE) the copied tables, on an autocommit connection: after a bulk load, the first reads
    of every page would otherwise set its hint bits and the planner would have no statistics, which made the
    first searches of a migrated million-chunk store several times slower (docs/benchmarks.md)."""
    conn.execute("SET statement_timeout = 0")
    try:
        for table in ("documents", "document_content", "document_tags", "chunks", "originals", "document_versions",
                      "note_keys"):
            conn.execute(f"VACUUM (ANALYZE) {table}")
        if conn.execute("SELECT to_regclass('embeddings')").fetchone()[0] is not None:
            conn.execute("VACUUM (ANALYZE) embeddings")
    finally:
        conn.execute("RESET statement_timeout")


def totals(conn: Any, with_vectors: bool) -> dict[str, int]:
    counts = {name: int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
              for name, table in (("documents", "documents"), ("chunks", "chunks"), ("tags", "document_tags"),
                                  ("versions", "document_versions"))}
    counts["vectors"] = int(conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]) if with_vectors else 0
    return counts
