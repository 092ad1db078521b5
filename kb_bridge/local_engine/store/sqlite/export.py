"""Reading a SQLite store whole, document by document, for `kb-bridge migrate` (local_engine/migration.py).

Read-only: the database is opened with mode=ro, so a migration never changes the source, and it may run
while the engine is stopped or running (each batch is one consistent read).

The file is not trusted: it may be any file at all, a damaged store, or one made to attack the reader. Nothing
in it runs with side effects: it is opened read-only and `query_only`, triggers only fire on writes, and
`trusted_schema=OFF` keeps functions with side effects out of its views, triggers and defaults. What is left is
a reader made to hang or to misread, so `check` refuses it before anything is copied: every table read must be
a plain table (a view in place of one could run a query that never ends), with the columns read, of a schema
version this engine knows, and the file must pass SQLite's own `quick_check`. A document whose values are
not what the engine writes (a hand-edited row) is returned as `Unreadable`, for the caller to report and skip.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import ConfigError
from ..base import StoredChunk, StoredDocument, StoredVersion
from .schema import LATEST_VERSION

# The tables and columns a migration reads.
COLUMNS = {
    "meta": ("key", "value"),
    "documents": ("id", "title", "doc_type", "source_path", "size_bytes", "sha256", "version", "created_at",
                  "updated_at"),
    "document_content": ("document_id", "text"),
    "document_tags": ("document_id", "tag"),
    "chunks": ("id", "document_id", "chunk_index", "title", "text", "text_sha256"),
    "embeddings": ("chunk_id", "vector"),
    "originals": ("document_id", "filename", "content_type", "data"),
    "document_versions": ("document_id", "version", "title", "text", "tags", "updated_at", "changed_by"),
    "note_keys": ("scope", "text_key", "document_id"),
    "jobs": ("id", "type", "status"),  # only to find the jobs not done yet (unfinished_jobs)
}
# Tables an older store may lack: `originals` (schema 4), a note's history and its duplicate keys (schema 7,
# kb engine 3.9, which also added documents.changed_by, read when it is there).
OPTIONAL = frozenset({"originals", "document_versions", "note_keys"})
# pgvector's halfvec holds at most this many dimensions.
MAX_DIMENSIONS = 16_000


@dataclasses.dataclass(frozen=True)
class Unreadable:
    """A document row that does not make a document (for the caller to report by id and skip)."""

    id: object
    reason: str


def open_readonly(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA trusted_schema = OFF")
    conn.execute("PRAGMA query_only = ON")
    return conn


def check(conn: sqlite3.Connection) -> None:
    """Raise ConfigError saying what is wrong unless this is a sound store that this engine wrote."""
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        kinds = {str(r[1]): (str(r[0]), str(r[2] or "")) for r in conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'view')")}
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"not a SQLite database ({_first_line(exc)})") from None
    if version > LATEST_VERSION:
        raise ConfigError(f"its schema version {version} is newer than this kb-bridge knows ({LATEST_VERSION}): "
                          "upgrade kb-bridge")
    if version < 1 or "documents" not in kinds:
        raise ConfigError("not a kb engine store (no engine schema in it)")
    older = " (an older engine's store: start `kb-bridge engine` on it once to upgrade it)" \
        if version < LATEST_VERSION else ""
    for table, columns in COLUMNS.items():
        kind, sql = kinds.get(table, ("", ""))
        if not kind and table in OPTIONAL:
            continue
        if not kind:
            raise ConfigError(f"not a kb engine store: it has no table {table}{older}")
        if kind != "table" or sql.lstrip().upper().startswith("CREATE VIRTUAL"):
            raise ConfigError(f"not a store the engine wrote: {table} is a {kind if kind != 'table' else 'virtual table'},"
                              " not a table")
        found = {str(r[1]): int(r[6]) for r in conn.execute(f"PRAGMA table_xinfo({table})")}
        missing = [c for c in columns if c not in found]
        if missing:
            raise ConfigError(f"not a store the engine wrote: {table} has no column {missing[0]}{older}")
        if any(hidden in (2, 3) for hidden in found.values()):  # generated columns run an expression per read
            raise ConfigError(f"not a store the engine wrote: {table} has a generated column")
    problems = [str(r[0]) for r in conn.execute("PRAGMA quick_check(1)")]
    if problems != ["ok"]:
        raise ConfigError(f"the file is damaged (SQLite's quick_check: {problems[0][:200]})")


def embedding(conn: sqlite3.Connection) -> tuple[str, int] | None:
    """The model/dimension/input the stored vectors were made with (meta) and their dimension, or None."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
    if row is None:
        return None
    identity = str(row[0])
    parts = identity.split("/")
    if len(parts) < 3 or not parts[1].isascii() or not parts[1].isdigit() \
            or not 1 <= int(parts[1]) <= MAX_DIMENSIONS:
        raise ConfigError("not a store the engine wrote: its embedding_model is not model/dimension/input")
    return identity, int(parts[1])


def totals(conn: sqlite3.Connection) -> dict[str, int]:
    counts = {name: int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
              for name, table in (("documents", "documents"), ("chunks", "chunks"), ("vectors", "embeddings"),
                                  ("tags", "document_tags"))}
    counts["versions"] = (int(conn.execute("SELECT COUNT(*) FROM document_versions").fetchone()[0])
                          if _has_table(conn, "document_versions") else 0)
    return counts


def unfinished_jobs(conn: sqlite3.Connection) -> list[tuple[int, str]]:
    """The jobs not done yet, oldest first, as (id, type): queued ones, and running ones (an engine stopped
    while it ran them queues them again when it starts)."""
    return [(int(r[0]), str(r[1])) for r in conn.execute(
        "SELECT id, type FROM jobs WHERE status IN ('queued', 'running') ORDER BY id")]


def documents_after(conn: sqlite3.Connection, after_id: object, limit: int) -> list[StoredDocument | Unreadable]:
    """Up to `limit` whole documents with ids above `after_id`, in id order, read in one transaction."""
    conn.execute("BEGIN")
    try:
        rows = conn.execute(
            "SELECT d.*, c.text AS content FROM documents d LEFT JOIN document_content c ON c.document_id = d.id "
            "WHERE d.id > ? ORDER BY d.id LIMIT ?", (after_id, limit)).fetchall()
        return [_readable(conn, row) for row in rows]
    finally:
        conn.execute("COMMIT")


def _readable(conn: sqlite3.Connection, row: sqlite3.Row) -> StoredDocument | Unreadable:
    try:
        document = _document(conn, row)
    except (TypeError, ValueError) as exc:
        return Unreadable(row["id"], f"its row cannot be read ({type(exc).__name__})")
    if not isinstance(document.id, int) or not all(isinstance(c.id, int) for c in document.chunks):
        return Unreadable(row["id"], "its id or a chunk's id is not a number")
    return document


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
                          created_at=_four_digit_year(row["created_at"]),
                          updated_at=_four_digit_year(row["updated_at"] or row["created_at"]),
                          content=row["content"] or "", tags=tags, chunks=chunks, original=_original(conn, row["id"]),
                          changed_by=row["changed_by"] if "changed_by" in row.keys() else None,
                          versions=_versions(conn, row["id"]), note_keys=_note_keys(conn, row["id"]))


def _versions(conn: sqlite3.Connection, document_id: int) -> tuple[StoredVersion, ...]:
    """The note's kept earlier versions, oldest first (schema 7, engine 3.9); tags a JSON array."""
    if not _has_table(conn, "document_versions"):
        return ()
    rows = conn.execute("SELECT version, title, text, tags, updated_at, changed_by FROM document_versions "
                        "WHERE document_id = ? ORDER BY version", (document_id,))
    return tuple(StoredVersion(r["version"], r["title"], r["text"], _tag_list(r["tags"]),
                               _four_digit_year(r["updated_at"]), r["changed_by"]) for r in rows)


def _four_digit_year(stamp: Any) -> Any:
    """A time with a year of one to three digits ("999-06-01T…", as engines before schema 10 wrote years
    before 1000) with its year padded to four, as schema 10 repairs it in place: a store read as it is (an
    older one, which `kb-bridge migrate` copies without opening it as the engine would) must not carry the
    unpadded form into PostgreSQL, whose schema's own repair has already run. Anything else is returned
    unchanged (a row is whatever the file holds: the caller checks it)."""
    if not isinstance(stamp, str):
        return stamp
    year, dash, rest = stamp.partition("-")
    if dash and 1 <= len(year) <= 3 and year.isascii() and year.isdigit():
        return year.zfill(4) + dash + rest
    return stamp


def _tag_list(text: str) -> tuple[str, ...]:
    tags = json.loads(text)
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise ValueError("a version's tags are not a list of strings")
    return tuple(tags)


def _note_keys(conn: sqlite3.Connection, document_id: int) -> tuple[tuple[str, str], ...]:
    """The duplicate keys the note holds (schema 7); a key held by a job that has no document yet stays."""
    if not _has_table(conn, "note_keys"):
        return ()
    return tuple((r[0], r[1]) for r in conn.execute(
        "SELECT scope, text_key FROM note_keys WHERE document_id = ? ORDER BY scope, text_key", (document_id,)))


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def _original(conn: sqlite3.Connection, document_id: int) -> tuple[str | None, str, bytes] | None:
    """The uploaded file's bytes, on a store that keeps them (schema 4, engine 3.6)."""
    if not _has_table(conn, "originals"):
        return None
    row = conn.execute("SELECT filename, content_type, data FROM originals WHERE document_id = ?", (document_id,)).fetchone()
    return (row[0], row[1], bytes(row[2])) if row is not None else None


def all_documents(conn: sqlite3.Connection, batch: int = 200) -> Iterator[list[StoredDocument | Unreadable]]:
    after: object = 0
    while documents := documents_after(conn, after, batch):
        yield documents
        after = documents[-1].id


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
