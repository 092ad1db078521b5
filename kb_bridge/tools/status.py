"""kb_status and kb_jobs: engine health and the ingestion queue."""

from __future__ import annotations

from kb_bridge import __version__, shapes
from kb_bridge.tools import args, render
from kb_bridge.tools.spec import Arguments, Result, ToolContext, ToolSpec

STATUS_OUTPUT = shapes.obj(
    {"bridge": shapes.obj({"version": shapes.STR}), "engine": {"type": "object"}},
)
JOBS_INPUT = args.arguments(
    {"status": args.JOB_STATUS, "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}}
)
JOBS_OUTPUT = shapes.obj({"jobs": {"type": "array", "items": shapes.JOB}, "total": shapes.INT})


def status(ctx: ToolContext, arguments: Arguments) -> Result:
    # The engine's status is passed through whole: it is the engine's to define (engine-api.md).
    return {"bridge": {"version": __version__}, "engine": ctx.engine.status()}


def jobs(ctx: ToolContext, arguments: Arguments) -> Result:
    raw = ctx.engine.list_jobs(arguments.get("status"), arguments.get("limit", 20))
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
        input_schema=args.arguments({}),
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
        input_schema=JOBS_INPUT,
        output_schema=JOBS_OUTPUT,
        handler=jobs,
        render=render_jobs,
        read_only=True,
        idempotent=True,
    ),
]
