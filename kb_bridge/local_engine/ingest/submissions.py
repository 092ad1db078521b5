"""Queueing ingestion jobs, with Idempotency-Key semantics.

The same key with the same body within the TTL (24 h) returns the original job and creates nothing; the
same key with another body is a conflict. "The same body" is the sha256 of the canonical JSON of the
request's meaning: the note's fields, or the uploaded file's sha256 plus its name and fields. The store
checks and inserts in one transaction, so two concurrent retries cannot both create a job.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..clock import now_iso, seconds_ago_iso
from ..errors import Conflict
from ..store.base import JSON, Idempotency, NoteKey, Store, Submission, note_text_key
from .scheduling import Submitters, lane_of
from .staging import HashingFile, Staging


def body_digest(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


class Intake:
    """Where new work enters: notes and uploaded files become queued jobs."""

    def __init__(self, store: Store, staging: Staging, on_queued: Callable[[], None], idempotency_ttl_seconds: int,
                 cancel_reading: Callable[[int], bool] = lambda job_id: False) -> None:
        self._store = store
        self._staging = staging
        self._on_queued = on_queued
        self._cancel_reading = cancel_reading
        self._ttl = idempotency_ttl_seconds
        self._submitters = Submitters()

    def submit_note(self, fields: dict[str, Any], key: str | None, priority: str | None = None,
                    unique_in: str | None = None) -> tuple[JSON, bool]:
        """Queue a note. Returns (job, created); created is False when an idempotent replay found the job,
        or when, `unique_in` a tag, a note with the same normalised text and that tag is already kept or
        queued (then the job is that note's, with `duplicate_of`)."""
        text = str(fields.get("text") or "")
        size = len(text.encode("utf-8"))
        unique = NoteKey(unique_in, note_text_key(text)) if unique_in is not None else None
        submission = Submission("note", fields, priority=lane_of("note", priority, size), unique=unique)
        job, created = self._store.submit(submission, self._idempotency(key, fields), now_iso())
        if created:
            self._on_queued()
        return job, created

    def submit_file(
        self, part: HashingFile, filename: str, doc_type: str, fields: dict[str, Any], key: str | None,
        priority: str | None = None, submitter: str | None = None,
    ) -> tuple[JSON, bool]:
        """Keep the uploaded file and queue it. Returns (job, created) like submit_note. An undeclared upload
        is prompt work when its `submitter` sent no other lately (scheduling.Submitters), else files."""
        sha256 = part.sha256()
        idempotency = self._idempotency(key, {**fields, "filename": filename, "file_sha256": sha256})
        staged = self._staging.keep(part, Path(filename).suffix.lower())
        single = priority is None and submitter is not None and self._submitters.single(submitter)
        payload = {**fields, "doc_type": doc_type, "size": staged.size, "sha256": sha256}
        submission = Submission("file", payload, filename=filename, staged_path=staged.path.name,
                                priority=lane_of("file", priority, staged.size, single))
        try:
            job, created = self._store.submit(submission, idempotency, now_iso())
        except BaseException:
            self._staging.remove(staged.path)
            raise
        if created:
            self._on_queued()
        else:
            self._staging.remove(staged.path)
        return job, created

    def cancel(self, job_id: int) -> JSON:
        """Take back a queued job (3.10), or a running one whose file the worker is reading (its read is
        killed), and remove the file it had staged; Conflict for a job past reading or ended."""
        try:
            job, staged = self._store.cancel_job(job_id, now_iso())
        except Conflict:
            # Past reading, a job's chunks are in the model's windows and its document may be committing:
            # cancelling it there would race the store thread, so it stays 409 (docs/engine-api.md).
            if not self._cancel_reading(job_id):
                raise
            job, staged = self._store.cancel_job(job_id, now_iso(), running=True)
        if staged is not None:
            self._staging.remove(self._staging.directory / staged)
        return job

    def _idempotency(self, key: str | None, meaning: dict[str, Any]) -> Idempotency | None:
        if key is None:
            return None
        return Idempotency(key, body_digest(meaning), seconds_ago_iso(self._ttl))
