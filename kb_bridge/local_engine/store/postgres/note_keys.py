"""SQL for the keys that refuse a duplicate note (`note_keys`, schema.py version 5), as
store/sqlite/note_keys.py does it (same names and signatures). Several replicas may queue the same note at
the same moment: INSERT ... ON CONFLICT DO NOTHING waits for a transaction holding the same key to end,
so exactly one takes it and the other reads the holder (READ COMMITTED: a new statement sees the commit)."""

from __future__ import annotations

from typing import Any


def take(conn: Any, scope: str, text_key: str) -> tuple[int | None, int | None] | None:
    """Take the key for a note about to be queued: None when it was free (now held, job still to be set),
    else (job id, document id) of the note that holds it. A key whose job ended without storing its note
    (failed or cancelled) is free (older engines kept a cancelled job's key for ever)."""
    while True:
        conn.execute("DELETE FROM note_keys WHERE scope = %s AND text_key = %s AND document_id IS NULL "
                     "AND job_id IN (SELECT id FROM jobs WHERE status IN ('failed', 'cancelled'))", (scope, text_key))
        taken = conn.execute("INSERT INTO note_keys (scope, text_key) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                             (scope, text_key)).rowcount
        if taken:
            return None
        row = conn.execute("SELECT job_id, document_id FROM note_keys WHERE scope = %s AND text_key = %s",
                           (scope, text_key)).fetchone()
        if row is not None:
            return (row[0], row[1])
        # Each statement sees the latest commits: the holder let go of the key between the two (its note was
        # deleted or changed on another replica). The key is free: take it.


def set_job(conn: Any, scope: str, text_key: str, job_id: int) -> None:
    conn.execute("UPDATE note_keys SET job_id = %s WHERE scope = %s AND text_key = %s", (job_id, scope, text_key))


def job_stored(conn: Any, job_id: int, doc_id: int) -> None:
    conn.execute("UPDATE note_keys SET document_id = %s WHERE job_id = %s", (doc_id, job_id))


def job_ended(conn: Any, job_id: int) -> None:
    """The job made no note (it failed or was cancelled): its key is free again."""
    # Only once the job has ended: a job another replica took over may still store its note.
    conn.execute("DELETE FROM note_keys WHERE job_id = %s AND document_id IS NULL "
                 "AND EXISTS (SELECT 1 FROM jobs WHERE id = %s AND status IN ('failed', 'cancelled'))", (job_id, job_id))


def key_of(conn: Any, doc_id: int) -> tuple[str, str, int | None] | None:
    row = conn.execute("SELECT scope, text_key, job_id FROM note_keys WHERE document_id = %s", (doc_id,)).fetchone()
    return (row[0], row[1], row[2]) if row is not None else None


def release(conn: Any, doc_id: int) -> None:
    conn.execute("DELETE FROM note_keys WHERE document_id = %s", (doc_id,))


def hold(conn: Any, scope: str, text_key: str, job_id: int | None, doc_id: int) -> bool:
    return bool(conn.execute(
        "INSERT INTO note_keys (scope, text_key, job_id, document_id) VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (scope, text_key, job_id, doc_id),
    ).rowcount)
