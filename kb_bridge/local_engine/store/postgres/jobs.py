"""SQL for the job queue shared by every replica, its leases, uploaded bytes and Idempotency-Keys.

A replica claims a job with SELECT ... FOR UPDATE SKIP LOCKED (two replicas never take the same row, and
none waits on another's lock) and holds it by a lease: `lease_owner` (the replica's id) and
`lease_expires`, which the replica renews while it works (PostgresStore's lease keeper). A job whose lease
ran out (its replica was killed or frozen) is claimed again by whoever looks next. Completing checks the
lease in the same transaction that stores the document, so a job yields exactly one document even when its
first replica wakes up after another took it over.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterator, Sequence
from typing import Any

from ...errors import Conflict, NotFound
from ..base import JOB_STATUSES, MAX_RESUMES, PRIORITIES, RESUME_LIMIT_ERROR
from ..job_tags import job_tags, stored_tags
from . import note_keys
from .documents import dicts

logger = logging.getLogger(__name__)

_JOB_COLUMNS = "id, type, status, document_id, filename, error, created_at, started_at, finished_at, priority, tags"
_CLAIMED = "id, type, filename, payload, staged_path, priority"
UPLOAD_PART_BYTES = 4 * 1024 * 1024


def _job(row: dict[str, Any]) -> dict[str, object]:
    job: dict[str, object] = {column: row[column] for column in _JOB_COLUMNS.split(", ")}
    job["priority"] = PRIORITIES[1 if row["priority"] else 0]
    job["tags"] = job_tags(row["tags"])
    return job


def create_job(conn: Any, job_type: str, now: str, payload: dict[str, Any] | None, filename: str | None,
               staged_path: str | None, priority: int) -> dict[str, object]:
    job_id = conn.execute(
        "INSERT INTO jobs (type, status, filename, created_at, payload, staged_path, priority, tags) "
        "VALUES (%s, 'queued', %s, %s, %s, %s, %s, %s) RETURNING id",
        (job_type, filename, now, json.dumps(payload) if payload is not None else None, staged_path, priority,
         stored_tags(payload)),
    ).fetchone()[0]
    return get_job(conn, int(job_id))


def store_upload(conn: Any, job_id: int, parts: Iterator[bytes]) -> None:
    """Keep an uploaded file's bytes with its job until the job is done (any replica may run it)."""
    with conn.cursor() as cursor:
        for number, data in enumerate(parts):
            cursor.execute("INSERT INTO job_uploads (job_id, part, data) VALUES (%s, %s, %s)", (job_id, number, data))


def upload_parts(conn: Any, job_id: int) -> Iterator[bytes]:
    """The uploaded bytes of a job, part by part (one part in memory at a time)."""
    part = 0
    while True:
        row = conn.execute("SELECT data FROM job_uploads WHERE job_id = %s AND part = %s", (job_id, part)).fetchone()
        if row is None:
            return
        yield bytes(row[0])
        part += 1


def record_finished_update(conn: Any, document_id: int, now: str) -> None:
    conn.execute("INSERT INTO jobs (type, status, document_id, created_at, started_at, finished_at) "
                 "VALUES ('update', 'done', %s, %s, %s, %s)", (document_id, now, now, now))


def get_job(conn: Any, job_id: int) -> dict[str, object]:
    rows = dicts(conn, f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = %s", (job_id,))
    if not rows:
        raise NotFound(f"job {job_id} not found")
    return _job(rows[0])


def list_jobs(conn: Any, status: str | None, limit: int, offset: int) -> tuple[list[dict[str, object]], int]:
    where, params = ("WHERE status = %s", [status]) if status else ("", [])
    total = conn.execute(f"SELECT COUNT(*) FROM jobs {where}", params).fetchone()[0]
    rows = dicts(conn, f"SELECT {_JOB_COLUMNS} FROM jobs {where} ORDER BY id DESC LIMIT %s OFFSET %s",
                 [*params, limit, offset])
    return [_job(row) for row in rows], int(total)


def queue_counts(conn: Any) -> dict[str, int]:
    counts = dict.fromkeys(JOB_STATUSES, 0)
    counts.update({str(r[0]): int(r[1]) for r in conn.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status")})
    return counts


def claim_next(conn: Any, owner: str, lease_seconds: float, now: str,
               priorities: Collection[int] | None, job_type: str | None = None) -> dict[str, Any] | None:
    """Take the next job (call inside a transaction): one whose lease ran out first (its replica is gone),
    then queued jobs, the highest priority first (of `priorities`, if given), then the oldest; of `job_type`
    only, if given. None when there is none."""
    of_type, type_params = ("", []) if job_type is None else ("AND type = %s ", [job_type])
    while True:
        rows = dicts(
            conn,
            f"SELECT {_CLAIMED}, document_id, resumes + working AS resumes FROM jobs WHERE status = 'running' "
            f"AND lease_expires < now() {of_type}ORDER BY lease_expires LIMIT 1 FOR UPDATE SKIP LOCKED",
            type_params,
        )
        if not rows or rows[0]["resumes"] <= MAX_RESUMES:
            break
        # Its replicas stopped while working on it more than MAX_RESUMES times: it may be what stops them.
        _give_up(conn, int(rows[0]["id"]), now)
    if rows:  # a takeover is a resume when its replica stopped while working on it (not one only claimed ahead)
        conn.execute("UPDATE jobs SET resumes = resumes + working WHERE id = %s", (rows[0]["id"],))
    else:
        among, params = ("", []) if priorities is None else ("AND priority = ANY(%s) ", [list(priorities)])
        rows = dicts(
            conn,
            f"SELECT {_CLAIMED}, document_id, resumes FROM jobs WHERE status = 'queued' "
            f"{among}{of_type}ORDER BY priority DESC, id LIMIT 1 FOR UPDATE SKIP LOCKED",
            [*params, *type_params],
        )
    if not rows:
        return None
    row = rows[0]
    conn.execute(
        # A file is working from its claim: the files thread reads and chunks it at once (set_working).
        "UPDATE jobs SET status = 'running', started_at = %s, lease_owner = %s, working = (type = 'file')::int, "
        "lease_expires = now() + make_interval(secs => %s) WHERE id = %s",
        (now, owner, lease_seconds, row["id"]),
    )
    return row


def _give_up(conn: Any, job_id: int, now: str) -> None:
    """Fail a job resumed MAX_RESUMES times, whichever replica held it last."""
    fail_job(conn, job_id, None, RESUME_LIMIT_ERROR, now)
    note_keys.job_ended(conn, job_id)
    logger.warning("job %d failed: %s", job_id, RESUME_LIMIT_ERROR)


def renew_leases(conn: Any, owner: str, job_ids: Sequence[int], lease_seconds: float) -> set[int]:
    """Extend this replica's leases; returns the ids it still holds (others were taken over)."""
    rows = conn.execute(
        "UPDATE jobs SET lease_expires = now() + make_interval(secs => %s) "
        "WHERE id = ANY(%s) AND status = 'running' AND lease_owner = %s RETURNING id",
        (lease_seconds, list(job_ids), owner),
    ).fetchall()
    return {int(r[0]) for r in rows}


def take_for_completion(conn: Any, job_id: int, owner: str) -> bool:
    """Lock the job if this replica still holds it (call in the storing transaction)."""
    return conn.execute(
        "SELECT 1 FROM jobs WHERE id = %s AND status = 'running' AND lease_owner = %s FOR UPDATE",
        (job_id, owner),
    ).fetchone() is not None


def finish_job(conn: Any, job_id: int, document_id: int, now: str) -> None:
    conn.execute("UPDATE jobs SET status = 'done', document_id = %s, finished_at = %s, payload = NULL, "
                 "staged_path = NULL, lease_owner = NULL, lease_expires = NULL WHERE id = %s",
                 (document_id, now, job_id))
    conn.execute("DELETE FROM job_uploads WHERE job_id = %s", (job_id,))


def fail_job(conn: Any, job_id: int, owner: str | None, error: str, now: str) -> None:
    """Fail a job this replica holds (a job another replica took over is left to it, and so is one put back in
    the queue since, which is no replica's); `owner` None: whichever replica holds it (a job given up after too
    many resumes)."""
    held, params = ("", ()) if owner is None else ("AND status = 'running' AND lease_owner = %s", (owner,))
    failed = conn.execute(
        "UPDATE jobs SET status = 'failed', error = %s, finished_at = %s, payload = NULL, staged_path = NULL, "
        f"lease_owner = NULL, lease_expires = NULL WHERE id = %s AND status IN ('queued', 'running') {held}",
        (error, now, job_id, *params)).rowcount
    if failed:
        conn.execute("DELETE FROM job_uploads WHERE job_id = %s", (job_id,))


def cancel_job(conn: Any, job_id: int, now: str, running_owner: str | None = None) -> tuple[dict[str, object], str | None]:
    """Only a queued job is cancelled, and a running one this replica (`running_owner`) holds and has dropped
    (Store.cancel_job); the row lock (FOR UPDATE) orders it against a replica's claim."""
    rows = conn.execute("SELECT staged_path FROM jobs WHERE id = %s AND (status = 'queued' OR (status = 'running' "
                        "AND lease_owner = %s)) FOR UPDATE", (job_id, running_owner)).fetchall()
    if rows:
        conn.execute("UPDATE jobs SET status = 'cancelled', finished_at = %s, payload = NULL, staged_path = NULL, "
                     "lease_owner = NULL, lease_expires = NULL WHERE id = %s", (now, job_id))
        conn.execute("DELETE FROM job_uploads WHERE job_id = %s", (job_id,))
    job = get_job(conn, job_id)
    if job["status"] != "cancelled":
        raise Conflict(f"job {job_id} is {job['status']}: only a queued job, or a running one whose file is "
                       "still being read, can be cancelled")
    return job, str(rows[0][0]) if rows and rows[0][0] is not None else None


def set_working(conn: Any, job_ids: Sequence[int], owner: str, working: bool) -> None:
    """Mark jobs this replica holds as worked on (prepared, embedded or stored) or waiting (Store.set_working)."""
    conn.execute("UPDATE jobs SET working = %s WHERE id = ANY(%s) AND status = 'running' AND lease_owner = %s",
                 (int(working), list(job_ids), owner))


def requeue(conn: Any, job_id: int, owner: str) -> None:
    conn.execute("UPDATE jobs SET status = 'queued', started_at = NULL, lease_owner = NULL, lease_expires = NULL, "
                 "working = 0 WHERE id = %s AND status = 'running' AND lease_owner = %s", (job_id, owner))


def requeue_owned(conn: Any, owner: str, now: str) -> tuple[int, list[int]]:
    """At start: this replica's jobs from before a crash go back to the queue at once (not after the lease);
    one it stopped while working on counts a resume, and one resumed MAX_RESUMES times already fails instead
    (a job only claimed ahead is not blamed): (jobs requeued, ids of those failed)."""
    conn.execute("UPDATE jobs SET resumes = resumes + working WHERE status = 'running' AND lease_owner = %s",
                 (owner,))
    given_up = [int(row[0]) for row in conn.execute(
        "SELECT id FROM jobs WHERE status = 'running' AND lease_owner = %s AND resumes > %s", (owner, MAX_RESUMES))]
    for job_id in given_up:
        _give_up(conn, job_id, now)
    requeued = int(conn.execute("UPDATE jobs SET status = 'queued', started_at = NULL, lease_owner = NULL, "
                                "lease_expires = NULL, working = 0 WHERE status = 'running' AND lease_owner = %s",
                                (owner,)).rowcount)
    return requeued, given_up


def staged_paths_in_use(conn: Any) -> set[str]:
    return {str(r[0]) for r in conn.execute("SELECT staged_path FROM jobs WHERE staged_path IS NOT NULL "
                                             "AND status IN ('queued', 'running')")}


def lock_idempotency_key(conn: Any, key: str) -> None:
    """Serialise requests with one key across replicas for this transaction."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 7))", (key,))


def find_idempotent_job(conn: Any, key: str, body_sha256: str, not_before: str) -> dict[str, object] | None:
    row = conn.execute("SELECT body_sha256, job_id FROM idempotency_keys WHERE key = %s AND created_at > %s",
                       (key, not_before)).fetchone()
    if row is None:
        return None
    if row[0] != body_sha256:
        raise Conflict("this Idempotency-Key was already used with a different request body")
    return get_job(conn, int(row[1]))


def remember_idempotency_key(conn: Any, key: str, body_sha256: str, job_id: int, now: str) -> None:
    conn.execute("INSERT INTO idempotency_keys (key, body_sha256, job_id, created_at) VALUES (%s, %s, %s, %s) "
                 "ON CONFLICT (key) DO UPDATE SET body_sha256 = EXCLUDED.body_sha256, job_id = EXCLUDED.job_id, "
                 "created_at = EXCLUDED.created_at", (key, body_sha256, job_id, now))


def forget_idempotency_keys_before(conn: Any, not_before: str) -> int:
    return int(conn.execute("DELETE FROM idempotency_keys WHERE created_at <= %s", (not_before,)).rowcount)
