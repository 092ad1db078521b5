"""The change log that each replica's full-text index follows (store/derived.py), on PostgreSQL.

Triggers (schema.py) write a row for every change of a chunk or of a document's tags with `seq` NULL. Just
before commit every write transaction calls `seal`: it takes the next number from `index_log_head` and
gives it to its rows. The head's row lock is held from there to the commit, so transactions that log
anything get consecutive numbers in the order they commit, and a rolled-back one returns its number. A
reader that has applied everything up to n and sees n + 1 therefore knows nothing before it is still to
come: the guarantee a plain sequence (numbers taken at insert, committed in another order) does not give.
The lock is held for microseconds, and a replica frozen while holding it is cut off by the server after
db.IDLE_IN_TRANSACTION_TIMEOUT_MS.

The log is not pruned by replicas, which do not know each other's positions; `forget_before` drops entries
older than a week at start, and a replica whose index is older than what was dropped rebuilds it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from .. import index_rows
from ..text_index import ChunkRow

KEEP_DAYS = 7


def seal(conn: Any) -> None:
    """Number this transaction's log rows (call last in a write transaction)."""
    if conn.execute("SELECT 1 FROM index_log WHERE seq IS NULL LIMIT 1").fetchone() is None:
        return
    seq = conn.execute("UPDATE index_log_head SET seq = seq + 1 RETURNING seq").fetchone()[0]
    conn.execute("UPDATE index_log SET seq = %s WHERE seq IS NULL", (seq,))


def changes_after(conn: Any, seq: int, limit: int) -> list[tuple[int, str, int]]:
    """(seq, kind, id) after `seq`, oldest first; whole transactions only (a reader stops between two)."""
    rows = conn.execute(
        "SELECT seq, kind, id FROM index_log WHERE seq > %s AND seq <= "
        "(SELECT COALESCE(MAX(seq), %s) FROM (SELECT seq FROM index_log WHERE seq > %s ORDER BY seq LIMIT %s) s) "
        "ORDER BY seq, id",
        (seq, seq, seq, limit),
    ).fetchall()
    return [(int(r[0]), str(r[1]), int(r[2])) for r in rows]


def last_seq(conn: Any) -> int:
    return int(conn.execute("SELECT seq FROM index_log_head").fetchone()[0])


def prune(conn: Any, through: int) -> None:
    """Nothing: replicas do not know each other's positions (see forget_before)."""


def forget_before(conn: Any) -> int:
    """Drop entries older than KEEP_DAYS; remember the newest dropped position. Returns how many went."""
    row = conn.execute(
        "WITH gone AS (DELETE FROM index_log WHERE seq IS NOT NULL AND logged_at < now() - make_interval(days => %s) "
        "RETURNING seq) SELECT COUNT(*), MAX(seq) FROM gone",
        (KEEP_DAYS,),
    ).fetchone()
    if row[1] is not None:
        conn.execute(
            "INSERT INTO meta VALUES ('index_log_pruned', %s) ON CONFLICT (key) DO UPDATE "
            "SET value = GREATEST(meta.value::bigint, EXCLUDED.value::bigint)::text",
            (str(row[1]),),
        )
    return int(row[0])


def pruned_through(conn: Any) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'index_log_pruned'").fetchone()
    return int(row[0]) if row else 0


def epoch(conn: Any) -> str:
    row = conn.execute("SELECT value FROM meta WHERE key = 'index_epoch'").fetchone()
    return str(row[0]) if row else ""


def chunk_rows(conn: Any, chunk_ids: Sequence[int]) -> list[ChunkRow]:
    return _with_tags(conn, conn.execute(index_rows.SELECT + " WHERE c.id = ANY(%s)", (list(chunk_ids),)).fetchall())


def document_chunk_rows(conn: Any, document_ids: Sequence[int]) -> list[ChunkRow]:
    rows = conn.execute(index_rows.SELECT + " WHERE c.document_id = ANY(%s)", (list(document_ids),)).fetchall()
    return _with_tags(conn, rows)


def all_chunk_rows(conn: Any, batch: int = 20_000) -> Iterator[list[ChunkRow]]:
    last = 0
    while rows := conn.execute(index_rows.SELECT + " WHERE c.id > %s ORDER BY c.id LIMIT %s", (last, batch)).fetchall():
        yield _with_tags(conn, rows)
        last = int(rows[-1][0])


def vectors(conn: Any, chunk_ids: Sequence[int]) -> dict[int, bytes]:
    """Not followed: vectors live in pgvector (derived.py runs with follow_vectors=False)."""
    return {}


def all_vectors(conn: Any, batch: int = 20_000) -> Iterator[list[tuple[int, bytes]]]:
    return iter(())


def tags_of(conn: Any, document_ids: Sequence[int] | set[int]) -> dict[int, list[str]]:
    ids = sorted(set(document_ids))
    found: dict[int, list[str]] = {doc_id: [] for doc_id in ids}
    # COLLATE "C": in code-point order, as SQLite sorts them, whatever the database's collation (the
    # official image's en_US.UTF-8 put "a" before "B" and "collectionb" before "collection:z").
    for doc_id, tag in conn.execute(
        'SELECT document_id, tag FROM document_tags WHERE document_id = ANY(%s) ORDER BY tag COLLATE "C"', (ids,)
    ):
        found[int(doc_id)].append(str(tag))
    return found


def _with_tags(conn: Any, rows: Sequence[Sequence[Any]]) -> list[ChunkRow]:
    return index_rows.with_tags(rows, lambda ids: tags_of(conn, ids))
