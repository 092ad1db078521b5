"""Waiting for an engine job, and telling the caller how it goes (issue 38 item 3).

A waiting call (kb_addnote or kb_upload_finish with `wait`, a task's tasks/result) polls the job and turns
each new stage into a progress notification: queued → running → chunks embedded of all (the engine's
`progress`, 3.10, when the answering engine runs the job) → done. Progress only ever increases (the MCP
rule), so a stage is reported once, and a stage that reads as no further along (another engine replica
answering without `progress`) is not reported at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from kb_bridge import shapes
from kb_bridge.errors import EngineFailure, IngestionFailed, Retryable
from kb_bridge.tools.spec import ProgressFn, ToolContext

logger = logging.getLogger(__name__)

TERMINAL = ("done", "failed", "cancelled")
# Where each stage sits between 0 and 1; chunks embedded fill the span between running and done.
_QUEUED, _RUNNING, _EMBEDDED = 0.05, 0.1, 0.95


class JobProgress:
    """Reports a job's stages on `report`, mapped onto [low, high] of `total`."""

    def __init__(self, report: ProgressFn, low: float = 0.0, high: float = 100.0, total: float = 100.0) -> None:
        self._report = report
        self._low, self._span, self._total = low, high - low, total
        self._last = low - 1.0

    def observe(self, job: Mapping[str, Any]) -> None:
        """`job` as the engine answers it (shaped or raw; a raw one may carry `progress`)."""
        fraction, message = stage(job)
        value = round(self._low + self._span * fraction, 3)
        if value > self._last:
            self._last = value
            self._report(value, self._total, message)


def stage(job: Mapping[str, Any]) -> tuple[float, str]:
    """How far a job is (0..1) and a sentence saying so."""
    status, ident = job.get("status"), job.get("id")
    if status in TERMINAL:
        return 1.0, f"job {ident} is {status}"
    if status == "running":
        done, total = chunks(job)
        if total:
            return _RUNNING + (_EMBEDDED - _RUNNING) * done / total, f"job {ident} is running: {done} of {total} chunks embedded"
        return _RUNNING, f"job {ident} is running"
    return _QUEUED, f"job {ident} is {status}"


def chunks(job: Mapping[str, Any]) -> tuple[int, int]:
    """(chunks embedded, chunks in all) from the engine's optional `progress`; (0, 0) when it does not say."""
    progress = job.get("progress")
    if isinstance(progress, Mapping):
        done, total = progress.get("chunks_done"), progress.get("chunks_total")
        if isinstance(done, int) and isinstance(total, int) and 0 <= done <= total:
            return done, total
    return 0, 0


def wait_for_job(ctx: ToolContext, job: dict[str, Any], timeout: float, what: str = "note",
                 progress: JobProgress | None = None) -> dict[str, Any]:
    """Poll until the job is done (read-your-writes) or the time is up (then the job as it stands); a
    failed or cancelled job is IngestionFailed. Progress goes to ctx.progress unless `progress` is given."""
    tracker = progress or JobProgress(ctx.progress)
    with ctx.engine.deadline(timeout + ctx.settings.engine.call_deadline()):
        return _poll_job(ctx, job, timeout, what, tracker)


def _poll_job(ctx: ToolContext, job: dict[str, Any], timeout: float, what: str, tracker: JobProgress) -> dict[str, Any]:
    started = time.monotonic()
    delay = 0.02
    tracker.observe(job)
    while job["status"] not in TERMINAL and time.monotonic() - started < timeout:
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
        try:
            raw = ctx.engine.get_job(job["id"])
        except EngineFailure as exc:
            if not isinstance(exc, Retryable):
                raise
            # The engine has the job (it gave its id) and stopped answering (restarting, say): the wait ends as
            # when its time runs out, with the job as last seen. An error would tell the agent that a stored write
            # failed, and its repeat could store it twice.
            logger.info("stopped waiting for job %s: the engine did not answer (%s)", job["id"], exc.code)
            break
        tracker.observe(raw)
        job = shapes.job(raw)
    raise_if_failed(job, what)
    return job


def raise_if_failed(job: Mapping[str, Any], what: str) -> None:
    if job["status"] == "failed":
        raise IngestionFailed(f"the {what} could not be indexed: {job['error'] or 'no reason given'}", job_id=job["id"])
    if job["status"] == "cancelled":
        raise IngestionFailed(f"the {what} was not indexed: job {job['id']} was cancelled before it ran", job_id=job["id"])
