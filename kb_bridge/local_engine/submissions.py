"""Queueing ingestion jobs, with Idempotency-Key semantics.

The same key with the same body within the TTL (24 h) returns the original job and creates nothing; the
same key with another body is a conflict. "The same body" is the sha256 of the canonical JSON of the
request's meaning: the note's fields, or the uploaded file's sha256 plus its name and fields. The check
and the insert share one write transaction, so two concurrent retries cannot both create a job.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import jobs
from .clock import now_iso, seconds_ago_iso
from .uploads import HashingFile

if TYPE_CHECKING:
    from .engine import Engine


def body_digest(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def submit_note(engine: Engine, fields: dict[str, Any], key: str | None) -> tuple[dict[str, object], bool]:
    """Queue a note. Returns (job, created); created is False when an idempotent replay found the job."""
    digest = body_digest(fields)
    with engine.db.write() as conn:
        earlier = _earlier_job(engine, conn, key, digest)
        if earlier is not None:
            return earlier, False
        job = jobs.create_job(conn, "note", now_iso(), payload=fields)
        _remember(conn, key, digest, job)
    engine.worker.notify()
    return job, True


def submit_file(
    engine: Engine, part: HashingFile, filename: str, doc_type: str, fields: dict[str, Any], key: str | None
) -> tuple[dict[str, object], bool]:
    """Keep the uploaded file and queue it. Returns (job, created) like submit_note."""
    sha256 = part.sha256()
    digest = body_digest({**fields, "filename": filename, "file_sha256": sha256})
    staged = engine.staging.keep(part, Path(filename).suffix.lower())
    try:
        with engine.db.write() as conn:
            earlier = _earlier_job(engine, conn, key, digest)
            if earlier is not None:
                engine.staging.remove(staged.path)
                return earlier, False
            payload = {**fields, "doc_type": doc_type, "size": staged.size, "sha256": sha256}
            job = jobs.create_job(conn, "file", now_iso(), payload=payload, filename=filename,
                                  staged_path=staged.path.name)
            _remember(conn, key, digest, job)
    except BaseException:
        engine.staging.remove(staged.path)
        raise
    engine.worker.notify()
    return job, True


def _earlier_job(engine: Engine, conn: sqlite3.Connection, key: str | None, digest: str) -> dict[str, object] | None:
    if key is None:
        return None
    return jobs.find_idempotent_job(conn, key, digest, seconds_ago_iso(engine.config.idempotency_ttl_seconds))


def _remember(conn: sqlite3.Connection, key: str | None, digest: str, job: dict[str, object]) -> None:
    if key is not None:
        jobs.remember_idempotency_key(conn, key, digest, int(str(job["id"])), str(job["created_at"]))
