"""kb_status and kb_jobs: engine health and the ingestion queue."""

from __future__ import annotations

from dataclasses import dataclass

from kb_bridge import __version__, shapes
from kb_bridge.tools import arguments as a
from kb_bridge.tools import render
from kb_bridge.tools.spec import Result, ToolContext, ToolSpec

STATUS_OUTPUT = shapes.obj(
    {"bridge": shapes.obj({"version": shapes.STR}), "engine": {"type": "object"}},
)


@dataclass(frozen=True, kw_only=True)
class JobsArguments:
    status: str | None = a.field(a.JOB_STATUS, default=None)
    limit: int = a.field(a.PAGE_LIMIT, default=20)


JOBS_OUTPUT = shapes.obj({"jobs": {"type": "array", "items": shapes.JOB}, "total": shapes.INT})


def status(ctx: ToolContext, args: a.NoArguments) -> Result:
    # The engine's status is passed through whole: it is the engine's to define (docs/engine-api.md).
    return {"bridge": {"version": __version__}, "engine": ctx.engine.status()}


def jobs(ctx: ToolContext, args: JobsArguments) -> Result:
    raw = ctx.engine.list_jobs(args.status, args.limit)
    listed = [shapes.job(j) for j in shapes.listed(raw, "jobs")]
    total = raw.get("total")
    return {"jobs": listed, "total": total if isinstance(total, int) else len(listed)}


def render_status(result: Result) -> str:
    engine = result["engine"]
    model = engine.get("model") or {}
    docs = engine.get("documents") or {}
    queue = engine.get("queue") or {}
    return (
        f"kb-bridge {result['bridge']['version']}; engine {engine.get('version', '?')}"
        f" (model: {model.get('name', 'none') if isinstance(model, dict) else model},"
        f" device: {engine.get('device', '?')}, modes: {', '.join(engine.get('search_modes') or [])}).\n"
        f"Documents: {docs.get('total', '?')} ({docs.get('notes', '?')} notes, {docs.get('files', '?')} files),"
        f" chunks: {engine.get('chunks', '?')}. Queue: {queue}"
    )


def render_jobs(result: Result) -> str:
    if not result["jobs"]:
        return "No jobs."
    return f"{len(result['jobs'])} of {result['total']} job(s):\n" + "\n".join(render.job_line(j) for j in result["jobs"])


TOOLS = [
    ToolSpec(
        name="kb_status",
        title="Knowledge base status",
        description="Engine health: version, embedding model, device, document and chunk counts, ingestion queue.",
        arguments=a.NoArguments,
        output_schema=STATUS_OUTPUT,
        handler=status,
        render=render_status,
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="kb_jobs",
        title="Ingestion jobs",
        description="Recent ingestion jobs, newest first; filter by status (queued, running, done, failed).",
        arguments=JobsArguments,
        output_schema=JOBS_OUTPUT,
        handler=jobs,
        render=render_jobs,
        read_only=True,
        idempotent=True,
    ),
]
