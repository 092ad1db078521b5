"""SQL for the ingestion queue and Idempotency-Key records. The queue lives in SQLite, so it survives
restarts: `running` jobs of a stopped engine go back to `queued` at the next start.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection
from typing import Any

from ...errors import Conflict, NotFound
from ..base import JOB_STATUSES, MAX_RESUMES, PRIORITIES, RESUME_LIMIT_ERROR
from ..job_tags import job_tags, stored_tags

_JOB_COLUMNS = "id, type, status, document_id, filename, error, created_at, started_at, finished_at, priority, tags"


def _job(row: sqlite3.Row) -> dict[str, object]:
    job: dict[str, object] = {column: row[column] for column in _JOB_COLUMNS.split(", ")}
    job["priority"] = PRIORITIES[1 if row["priority"] else 0]
    job["tags"] = job_tags(row["tags"])
    return job


def create_job(
    conn: sqlite3.Connection,
    job_type: str,
    now: str,
    payload: dict[str, Any] | None = None,
    filename: str | None = None,
    staged_path: str | None = None,
    priority: int = 0,
) -> dict[str, object]:
    cursor = conn.execute(
        "INSERT INTO jobs (type, status, filename, created_at, payload, staged_path, priority, tags) "
        "VALUES (?, 'queued', ?, ?, ?, ?, ?, ?)",
        (job_type, filename, now, json.dumps(payload) if payload is not None else None, staged_path, priority,
         stored_tags(payload)),
    )
    return get_job(conn, int(cursor.lastrowid or 0))


def record_finished_update(conn: sqlite3.Connection, document_id: int, now: str) -> None:
    """The history entry for a note update, which runs synchronously (type `update`, status `done`)."""
    conn.execute(
        "INSERT INTO jobs (type, status, document_id, created_at, started_at, finished_at) "
        "VALUES ('update', 'done', ?, ?, ?, ?)",
        (document_id, now, now, now),
    )


def get_job(conn: sqlite3.Connection, job_id: int) -> dict[str, object]:
    row = conn.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        raise NotFound(f"job {job_id} not found")
    return _job(row)


def list_jobs(
    conn: sqlite3.Connection, status: str | None, limit: int, offset: int
) -> tuple[list[dict[str, object]], int]:
    where, params = ("WHERE status = ?", [status]) if status else ("", [])
    total = conn.execute(f"SELECT COUNT(*) FROM jobs {where}", params).fetchone()[0]
    rows = conn.execute(
        f"SELECT {_JOB_COLUMNS} FROM jobs {where} ORDER BY id DESC LIMIT ? OFFSET ?", [*params, limit, offset]
    )
    return [_job(row) for row in rows], total


def queue_counts(conn: sqlite3.Connection) -> dict[str, int]:
    counts = dict.fromkeys(JOB_STATUSES, 0)
    counts.update(conn.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall())
    return counts


def claim_next(conn: sqlite3.Connection, now: str, priorities: Collection[int] | None = None,
               job_type: str | None = None) -> sqlite3.Row | None:
    """Mark the next queued job running and return it (call inside a write transaction): the highest
    priority first (of `priorities`, if given; of `job_type`, if given), then the oldest."""
    among = "" if priorities is None else f"AND priority IN ({', '.join(str(int(p)) for p in priorities) or 'NULL'}) "
    of_type, params = ("", ()) if job_type is None else ("AND type = ? ", (job_type,))
    row = conn.execute(
        "SELECT id, type, filename, payload, staged_path, priority, resumes FROM jobs WHERE status = 'queued' "
        f"{among}{of_type}ORDER BY priority DESC, id LIMIT 1", params
    ).fetchone()
    if row is not None:
        # A file is working from its claim: the files thread reads and chunks it at once (set_working).
        conn.execute("UPDATE jobs SET status = 'running', started_at = ?, working = (type = 'file') WHERE id = ?",
                     (now, row["id"]))
    return row


def attach_document(conn: sqlite3.Connection, job_id: int, document_id: int) -> None:
    """Record the job's stored document while the job is still running (it is done once searchable)."""
    conn.execute("UPDATE jobs SET document_id = ? WHERE id = ?", (document_id, job_id))


def finish_stored(conn: sqlite3.Connection, now: str) -> int:
    """Mark done the running jobs of a stopped engine that had already stored their document."""
    return conn.execute(
        "UPDATE jobs SET status = 'done', finished_at = ?, payload = NULL, staged_path = NULL "
        "WHERE status = 'running' AND document_id IS NOT NULL",
        (now,),
    ).rowcount


def finish_job(conn: sqlite3.Connection, job_id: int, document_id: int, now: str) -> None:
    # The payload (note text, upload fields) now lives in the document; keep the job row small.
    conn.execute(
        "UPDATE jobs SET status = 'done', document_id = ?, finished_at = ?, payload = NULL, staged_path = NULL "
        "WHERE id = ?",
        (document_id, now, job_id),
    )


def fail_job(conn: sqlite3.Connection, job_id: int, error: str, now: str) -> None:
    conn.execute(
        "UPDATE jobs SET status = 'failed', error = ?, finished_at = ?, payload = NULL, staged_path = NULL "
        "WHERE id = ?",
        (error, now, job_id),
    )


def cancel_job(conn: sqlite3.Connection, job_id: int, now: str, running: bool = False) -> tuple[dict[str, object], str | None]:
    """Inside one write transaction (SQLite's single writer orders it against a claim): only a queued job is
    cancelled, and a running one when `running` (the worker dropped it: Store.cancel_job)."""
    statuses = "('queued', 'running')" if running else "('queued')"
    row = conn.execute(f"SELECT staged_path FROM jobs WHERE id = ? AND status IN {statuses}", (job_id,)).fetchone()
    conn.execute(
        "UPDATE jobs SET status = 'cancelled', finished_at = ?, payload = NULL, staged_path = NULL "
        f"WHERE id = ? AND status IN {statuses}",
        (now, job_id),
    )
    job = get_job(conn, job_id)
    if job["status"] != "cancelled":
        raise Conflict(f"job {job_id} is {job['status']}: only a queued job, or a running one whose file is "
                       "still being read, can be cancelled")
    return job, row[0] if row is not None else None


def job_state(conn: sqlite3.Connection, job_id: int) -> tuple[str | None, int | None]:
    """The job's status (None: no such job) and the document attached to it."""
    row = conn.execute("SELECT status, document_id FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return (row[0], row[1]) if row else (None, None)


def set_working(conn: sqlite3.Connection, job_ids: Collection[int], working: bool) -> None:
    """Mark running jobs as worked on (prepared, embedded or stored) or waiting (Store.set_working)."""
    conn.execute(f"UPDATE jobs SET working = ? WHERE id IN ({', '.join('?' * len(job_ids))}) AND status = 'running'",
                 (int(working), *job_ids))


def requeue(conn: sqlite3.Connection, job_id: int) -> None:
    conn.execute("UPDATE jobs SET status = 'queued', started_at = NULL, working = 0 WHERE id = ? AND status = 'running'",
                 (job_id,))


def requeue_running(conn: sqlite3.Connection, now: str) -> tuple[int, list[int]]:
    """Put jobs that a stopped engine left `running` back in the queue (they run again from the start); one it
    stopped while working on counts a resume, and one resumed MAX_RESUMES times already fails instead (a job
    only claimed ahead, waiting for the model, is not blamed): (jobs requeued, ids of those failed)."""
    conn.execute("UPDATE jobs SET resumes = resumes + working WHERE status = 'running'")
    given_up = [int(row[0]) for row in conn.execute(
        "SELECT id FROM jobs WHERE status = 'running' AND resumes > ?", (MAX_RESUMES,))]
    for job_id in given_up:
        fail_job(conn, job_id, RESUME_LIMIT_ERROR, now)
    requeued = conn.execute("UPDATE jobs SET status = 'queued', started_at = NULL, working = 0 "
                            "WHERE status = 'running'").rowcount
    return requeued, given_up


def staged_paths_in_use(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT staged_path FROM jobs WHERE staged_path IS NOT NULL")}


def find_idempotent_job(
    conn: sqlite3.Connection, key: str, body_sha256: str, not_before: str
) -> dict[str, object] | None:
    """The job an earlier request with this key created (same body, within the window), else None.

    The same key with a different body is a Conflict: the client reused a key for another request.
    """
    row = conn.execute(
        "SELECT body_sha256, job_id FROM idempotency_keys WHERE key = ? AND created_at > ?", (key, not_before)
    ).fetchone()
    if row is None:
        return None
    if row["body_sha256"] != body_sha256:
        raise Conflict("this Idempotency-Key was already used with a different request body")
    return get_job(conn, row["job_id"])


def remember_idempotency_key(conn: sqlite3.Connection, key: str, body_sha256: str, job_id: int, now: str) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO idempotency_keys (key, body_sha256, job_id, created_at) VALUES (?, ?, ?, ?)",
        (key, body_sha256, job_id, now),
    )


def forget_idempotency_keys_before(conn: sqlite3.Connection, not_before: str) -> int:
    return conn.execute("DELETE FROM idempotency_keys WHERE created_at <= ?", (not_before,)).rowcount
