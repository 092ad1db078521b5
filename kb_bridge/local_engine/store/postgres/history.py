"""SQL for a note's earlier versions (`document_versions`, schema.py version 5), as store/sqlite/history.py
does it (same names and signatures)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .documents import dicts
from .index_log import tags_of

_COLUMNS = "version, title, tags, updated_at, changed_by"


def archive(conn: Any, doc_id: int) -> None:
    """Keep the document's current version (title, text, tags, time, author) before a change replaces it."""
    tags = json.dumps(tags_of(conn, [doc_id])[doc_id])
    conn.execute(
        "INSERT INTO document_versions (document_id, version, title, text, tags, updated_at, changed_by) "
        "SELECT d.id, d.version, d.title, c.text, %s, d.updated_at, d.changed_by "
        "FROM documents d JOIN document_content c ON c.document_id = d.id WHERE d.id = %s "
        "ON CONFLICT (document_id, version) DO UPDATE SET title = EXCLUDED.title, text = EXCLUDED.text, "
        "tags = EXCLUDED.tags, updated_at = EXCLUDED.updated_at, changed_by = EXCLUDED.changed_by",
        (tags, doc_id),
    )


def prune(conn: Any, doc_id: int, keep: int) -> None:
    conn.execute(
        "DELETE FROM document_versions WHERE document_id = %s AND version NOT IN "
        "(SELECT version FROM document_versions WHERE document_id = %s ORDER BY version DESC LIMIT %s)",
        (doc_id, doc_id, keep),
    )


def earlier_versions(conn: Any, doc_id: int) -> list[dict[str, object]]:
    rows = dicts(conn, f"SELECT {_COLUMNS} FROM document_versions WHERE document_id = %s ORDER BY version DESC",
                 (doc_id,))
    return [_version(row) for row in rows]


def earlier_version(conn: Any, doc_id: int, version: int) -> dict[str, object] | None:
    rows = dicts(conn, f"SELECT {_COLUMNS}, text FROM document_versions WHERE document_id = %s AND version = %s",
                 (doc_id, version))
    if not rows:
        return None
    found = _version(rows[0])
    found["content"] = rows[0]["text"]
    return found


def replace_all(conn: Any, doc_id: int, versions: Sequence[Mapping[str, Any]]) -> None:
    conn.execute("DELETE FROM document_versions WHERE document_id = %s", (doc_id,))
    with conn.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO document_versions (document_id, version, title, text, tags, updated_at, changed_by) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            [(doc_id, v["version"], v["title"], v["text"], json.dumps(list(v["tags"])), v["updated_at"],
              v["changed_by"]) for v in versions],
        )


def raise_version(conn: Any, doc_id: int, at_least: int) -> None:
    conn.execute("UPDATE documents SET version = %s WHERE id = %s AND version < %s", (at_least, doc_id, at_least))


def _version(row: Mapping[str, Any]) -> dict[str, object]:
    return {"version": row["version"], "title": row["title"], "tags": json.loads(row["tags"]),
            "updated_at": row["updated_at"], "changed_by": row["changed_by"], "current": False}
