"""SQL for the keys that refuse a duplicate note (`note_keys`, schema.py version 7): one row per note added
with `unique_in`, its primary key (scope, normalised text) taken in the transaction that queues the note,
so of two identical notes queued at the same moment exactly one gets it. store/postgres/note_keys.py
shares these names and signatures."""

from __future__ import annotations

import sqlite3


def take(conn: sqlite3.Connection, scope: str, text_key: str) -> tuple[int | None, int | None] | None:
    """Take the key for a note about to be queued: None when it was free (now held, job still to be set),
    else (job id, document id) of the note that holds it. A key whose job ended without storing its note
    (failed or cancelled) is free (older engines kept a cancelled job's key for ever)."""
    conn.execute("DELETE FROM note_keys WHERE scope = ? AND text_key = ? AND document_id IS NULL "
                 "AND job_id IN (SELECT id FROM jobs WHERE status IN ('failed', 'cancelled'))", (scope, text_key))
    taken = conn.execute("INSERT OR IGNORE INTO note_keys (scope, text_key) VALUES (?, ?)", (scope, text_key)).rowcount
    if taken:
        return None
    row = conn.execute("SELECT job_id, document_id FROM note_keys WHERE scope = ? AND text_key = ?",
                       (scope, text_key)).fetchone()
    return (row[0], row[1])


def set_job(conn: sqlite3.Connection, scope: str, text_key: str, job_id: int) -> None:
    conn.execute("UPDATE note_keys SET job_id = ? WHERE scope = ? AND text_key = ?", (job_id, scope, text_key))


def job_stored(conn: sqlite3.Connection, job_id: int, doc_id: int) -> None:
    """The job's note now exists as this document."""
    conn.execute("UPDATE note_keys SET document_id = ? WHERE job_id = ?", (doc_id, job_id))


def job_ended(conn: sqlite3.Connection, job_id: int) -> None:
    """The job made no note (it failed or was cancelled): its key is free again."""
    # Only once the job has ended: a job another replica took over may still store its note.
    conn.execute("DELETE FROM note_keys WHERE job_id = ? AND document_id IS NULL "
                 "AND EXISTS (SELECT 1 FROM jobs WHERE id = ? AND status IN ('failed', 'cancelled'))", (job_id, job_id))


def key_of(conn: sqlite3.Connection, doc_id: int) -> tuple[str, str, int | None] | None:
    """(scope, text key, job id) the document holds, or None."""
    row = conn.execute("SELECT scope, text_key, job_id FROM note_keys WHERE document_id = ?", (doc_id,)).fetchone()
    return (row[0], row[1], row[2]) if row is not None else None


def release(conn: sqlite3.Connection, doc_id: int) -> None:
    conn.execute("DELETE FROM note_keys WHERE document_id = ?", (doc_id,))


def hold(conn: sqlite3.Connection, scope: str, text_key: str, job_id: int | None, doc_id: int) -> bool:
    """Give the document this key unless another note holds it; whether it did."""
    return bool(conn.execute(
        "INSERT OR IGNORE INTO note_keys (scope, text_key, job_id, document_id) VALUES (?, ?, ?, ?)",
        (scope, text_key, job_id, doc_id),
    ).rowcount)
