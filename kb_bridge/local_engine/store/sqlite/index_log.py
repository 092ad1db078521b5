"""SQL for the change log that the derived indexes follow, and for the rows they are built from.

Triggers (schema.py, version 3) append to `index_log` in the same transaction as the change itself, so the
log holds every committed change in commit order and nothing that was rolled back. ../derived.py reads it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from .. import index_rows
from ..text_index import ChunkRow
from . import documents
from .db import in_parts


def changes_after(conn: sqlite3.Connection, seq: int, limit: int) -> list[tuple[int, str, int]]:
    """(seq, kind, id) of the changes after `seq`, oldest first."""
    return conn.execute("SELECT seq, kind, id FROM index_log WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit)).fetchall()


def last_seq(conn: sqlite3.Connection) -> int:
    """The newest position in the log, also after it was pruned (AUTOINCREMENT remembers it)."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'index_log'").fetchone()
    return int(row[0]) if row else 0


def prune(conn: sqlite3.Connection, through: int) -> None:
    """Forget changes every index has applied; remember how far, so a stale index knows to rebuild."""
    conn.execute("DELETE FROM index_log WHERE seq <= ?", (through,))
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('index_log_pruned', ?)", (str(through),))


def pruned_through(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'index_log_pruned'").fetchone()
    return int(row[0]) if row else 0


def epoch(conn: sqlite3.Connection) -> str:
    row = conn.execute("SELECT value FROM meta WHERE key = 'index_epoch'").fetchone()
    return str(row[0]) if row else ""


def chunk_rows(conn: sqlite3.Connection, chunk_ids: Sequence[int]) -> list[ChunkRow]:
    """What the text index holds for these chunks (those that still exist)."""
    return _with_tags(conn, _in_parts(conn, index_rows.SELECT + " WHERE c.id IN ({})", chunk_ids))


def document_chunk_rows(conn: sqlite3.Connection, document_ids: Sequence[int]) -> list[ChunkRow]:
    """What the text index holds for every chunk of these documents (those that still exist)."""
    return _with_tags(conn, _in_parts(conn, index_rows.SELECT + " WHERE c.document_id IN ({})", document_ids))


def all_chunk_rows(conn: sqlite3.Connection, batch: int = 20_000) -> Iterator[list[ChunkRow]]:
    cursor = conn.execute(index_rows.SELECT + " ORDER BY c.id")
    while rows := cursor.fetchmany(batch):
        yield _with_tags(conn, rows)


def vectors(conn: sqlite3.Connection, chunk_ids: Sequence[int]) -> dict[int, bytes]:
    """The stored vector of each of these chunks that has one."""
    rows = _in_parts(conn, "SELECT chunk_id, vector FROM embeddings WHERE chunk_id IN ({})", chunk_ids)
    return {int(row[0]): bytes(row[1]) for row in rows}


def all_vectors(conn: sqlite3.Connection, batch: int = 20_000) -> Iterator[list[tuple[int, bytes]]]:
    cursor = conn.execute("SELECT chunk_id, vector FROM embeddings ORDER BY chunk_id")
    while rows := cursor.fetchmany(batch):
        yield rows


def _with_tags(conn: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> list[ChunkRow]:
    return index_rows.with_tags(rows, lambda ids: documents.tags_of(conn, ids))


def _in_parts(conn: sqlite3.Connection, sql: str, ids: Sequence[int]) -> list[tuple[Any, ...]]:
    ids = sorted(set(ids))
    found: list[tuple[Any, ...]] = []
    for part, marks in in_parts(ids):
        found.extend(tuple(row) for row in conn.execute(sql.format(marks), part))
    return found
