"""SQL for a note's earlier versions (`document_versions`, schema.py version 7). Plain functions over a
connection inside the caller's transaction; store/postgres/history.py shares their names and signatures
(../sql_writes.py and ../sql_reads.py call either)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from .documents import tags_of

_COLUMNS = "version, title, tags, updated_at, changed_by"


def archive(conn: sqlite3.Connection, doc_id: int) -> None:
    """Keep the document's current version (title, text, tags, time, author) before a change replaces it."""
    tags = json.dumps(tags_of(conn, [doc_id])[doc_id])
    conn.execute(
        "INSERT OR REPLACE INTO document_versions (document_id, version, title, text, tags, updated_at, changed_by) "
        "SELECT d.id, d.version, d.title, c.text, ?, COALESCE(d.updated_at, d.created_at), d.changed_by "
        "FROM documents d JOIN document_content c ON c.document_id = d.id WHERE d.id = ?",
        (tags, doc_id),
    )


def prune(conn: sqlite3.Connection, doc_id: int, keep: int) -> None:
    """Drop all but the newest `keep` earlier versions of the document."""
    conn.execute(
        "DELETE FROM document_versions WHERE document_id = ? AND version NOT IN "
        "(SELECT version FROM document_versions WHERE document_id = ? ORDER BY version DESC LIMIT ?)",
        (doc_id, doc_id, keep),
    )


def earlier_versions(conn: sqlite3.Connection, doc_id: int) -> list[dict[str, object]]:
    """The kept earlier versions, newest first, without their text."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM document_versions WHERE document_id = ? ORDER BY version DESC", (doc_id,)
    ).fetchall()
    return [_version(row) for row in rows]


def earlier_version(conn: sqlite3.Connection, doc_id: int, version: int) -> dict[str, object] | None:
    """One kept earlier version with its text, or None."""
    row = conn.execute(
        f"SELECT {_COLUMNS}, text FROM document_versions WHERE document_id = ? AND version = ?", (doc_id, version)
    ).fetchone()
    if row is None:
        return None
    found = _version(row)
    found["content"] = row["text"]
    return found


def replace_all(conn: sqlite3.Connection, doc_id: int, versions: Sequence[Mapping[str, Any]]) -> None:
    """Make these the document's earlier versions (an import), dropping the ones it had."""
    conn.execute("DELETE FROM document_versions WHERE document_id = ?", (doc_id,))
    conn.executemany(
        "INSERT INTO document_versions (document_id, version, title, text, tags, updated_at, changed_by) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(doc_id, v["version"], v["title"], v["text"], json.dumps(list(v["tags"])), v["updated_at"], v["changed_by"])
         for v in versions],
    )


def raise_version(conn: sqlite3.Connection, doc_id: int, at_least: int) -> None:
    conn.execute("UPDATE documents SET version = ? WHERE id = ? AND version < ?", (at_least, doc_id, at_least))


def _version(row: sqlite3.Row) -> dict[str, object]:
    return {"version": row["version"], "title": row["title"], "tags": json.loads(row["tags"]),
            "updated_at": row["updated_at"], "changed_by": row["changed_by"], "current": False}
