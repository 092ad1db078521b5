"""Tools that can run as MCP tasks, and what a task is at any moment (issue 38 item 2), with no MCP types.

A task follows an engine job: making it runs the tool's first part (the note or the file becomes a job; a
`wait` asked for is dropped, the task being the wait), and its state is read from the job whenever asked,
so no bridge process holds it (ids: tools/task_ids.py). kb_update_note has no job to follow (the engine
updates a note before it answers, docs/engine-api.md), so its task is complete when made, holding its result.
A result too large for an id is held as a reference and read again from the engine (tools/task_results.py).
protocol/tasks.py turns these states into each protocol era's messages.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kb_bridge import shapes
from kb_bridge.errors import Conflict, EngineUnsupported, IngestionFailed, KbError, NotFound
from kb_bridge.tools import reach, task_results
from kb_bridge.tools.spec import Result, ToolContext, ToolSpec
from kb_bridge.tools.task_ids import TaskRef
from kb_bridge.tools.waiting import JobProgress, raise_if_failed, stage

# What each task-capable tool's task follows, and what its job indexes (for messages).
JOB, AT_ONCE = "job", "at once"
TASK_TOOLS: dict[str, str] = {"kb_addnote": JOB, "kb_upload_finish": JOB, "kb_update_note": AT_ONCE}
_INDEXES = {"kb_addnote": "note", "kb_upload_finish": "file"}

WORKING, COMPLETED, CANCELLED = "working", "completed", "cancelled"
POLL_INTERVAL_MS = 500


class UnknownTask(Exception):
    """No such task for this caller: never made here, another principal's, or its job is out of reach."""


@dataclass(frozen=True)
class TaskState:
    status: str  # WORKING, COMPLETED (with `result`, or the tool's `error`) or CANCELLED
    created_at: str
    updated_at: str
    message: str
    result: Result | None = None
    error: KbError | None = None

    @property
    def terminal(self) -> bool:
        return self.status != WORKING


def supports(tool: str) -> bool:
    return tool in TASK_TOOLS


def start(spec: ToolSpec, ctx: ToolContext, arguments: Any) -> tuple[Result, TaskRef]:
    """The tool's first part, on the pool thread: its result so far, and the task's reference."""
    if TASK_TOOLS[spec.name] == JOB and any(f.name == "wait" for f in dataclasses.fields(arguments)):
        arguments = dataclasses.replace(arguments, wait=False)
    with ctx.engine.deadline(ctx.settings.engine.call_deadline()):
        result = spec.handler(ctx, arguments)
    job_id = result.get("job_id") if TASK_TOOLS[spec.name] == JOB else None
    return result, TaskRef(ctx.principal.owner, spec.name, job_id if isinstance(job_id, int) else None, result, now_iso())


def made(ref: TaskRef) -> TaskState:
    """The task as it stands when made, with no engine call: its job was just queued (or it is done)."""
    if ref.job_id is None:
        return TaskState(COMPLETED, ref.created, ref.created, "done", result=ref.result)
    return TaskState(WORKING, ref.created, ref.created, f"job {ref.job_id} is {ref.result.get('status')}")


def read(ctx: ToolContext, ref: TaskRef, progress: JobProgress | None = None) -> TaskState:
    """The task as it stands; UnknownTask when the caller may not see it."""
    if ref.owner != ctx.principal.owner:
        raise UnknownTask()
    if ref.job_id is None:
        return _at_once(ctx, ref)
    try:
        raw = ctx.engine.get_job(ref.job_id)
    except NotFound:
        raise UnknownTask() from None
    job = shapes.job(raw)
    if not reach.job_visible(ctx.engine, ctx.principal, job):
        raise UnknownTask()
    if progress is not None:
        progress.observe(raw)
    return _state(ctx, ref, job, raw)


def wait(ctx: ToolContext, ref: TaskRef, timeout: float) -> TaskState:
    """Poll until the task ends or `timeout` passes, reporting the job's stages on ctx.progress."""
    tracker = JobProgress(ctx.progress)
    started, delay = time.monotonic(), 0.02
    with ctx.engine.deadline(timeout + ctx.settings.engine.call_deadline()):
        state = read(ctx, ref, tracker)
        while not state.terminal and time.monotonic() - started < timeout:
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
            state = read(ctx, ref, tracker)
    return state


def cancel(ctx: ToolContext, ref: TaskRef) -> TaskState:
    """Take back the task's job while it is queued; the task as it stands afterwards (still working when
    its job already runs: the engine cannot stop a running job)."""
    state = read(ctx, ref)
    if state.terminal or ref.job_id is None:
        return state
    try:
        raw = ctx.engine.cancel_job(ref.job_id)
    except (Conflict, EngineUnsupported):
        return read(ctx, ref)
    return _state(ctx, ref, shapes.job(raw), raw)


def _at_once(ctx: ToolContext, ref: TaskRef) -> TaskState:
    """A task done when made; its result read again when the id holds a reference (a note version that is
    kept no more is the task's NOT_FOUND error: the task ended, only its answer is gone)."""
    if ref.whole:
        return made(ref)
    try:
        result = task_results.restore(ctx, ref.tool, ref.result, None)
    except NotFound as exc:
        return TaskState(COMPLETED, ref.created, ref.created, "done", error=exc)
    return TaskState(COMPLETED, ref.created, ref.created, "done", result=result)


def _state(ctx: ToolContext, ref: TaskRef, job: dict[str, Any], raw: Mapping[str, Any]) -> TaskState:
    # The task began when the bridge made it (its job a moment before); it changed when its job last did.
    created = ref.created
    updated = max(created, job["finished_at"] or job["started_at"] or created)
    _fraction, message = stage(raw)
    status = job["status"]
    if status == "done":
        if ref.whole:
            result = {**ref.result, "status": "done"}
            if "document_id" in result:
                result["document_id"] = job["document_id"]
        else:
            result = task_results.restore(ctx, ref.tool, ref.result, job)
        return TaskState(COMPLETED, created, updated, message, result=result)
    if status == "cancelled":
        return TaskState(CANCELLED, created, updated, message)
    try:
        raise_if_failed(job, _INDEXES.get(ref.tool, "document"))
    except IngestionFailed as exc:
        return TaskState(COMPLETED, created, updated, message, error=exc)
    return TaskState(WORKING, created, updated, message)


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
