"""kb_status and kb_jobs: engine health and the ingestion queue."""

from __future__ import annotations

from dataclasses import dataclass

from kb_bridge import __version__, shapes
from kb_bridge.tools import arguments as a
from kb_bridge.errors import NotFound
from kb_bridge.tools import reach, render
from kb_bridge.tools.spec import Result, ToolContext, ToolSpec

STATUS_OUTPUT = shapes.result(
    {"bridge": shapes.obj({"version": shapes.STR}), "engine": {"type": "object"}},
)


@dataclass(frozen=True, kw_only=True)
class JobsArguments:
    status: str | None = a.field(a.JOB_STATUS, default=None)
    limit: int = a.field(a.PAGE_LIMIT, default=20)


JOBS_OUTPUT = shapes.result({"jobs": {"type": "array", "items": shapes.JOB}, "total": shapes.INT})


# Engine-wide counts a collection-limited token does not get: they would tell what the others hold.
ENGINE_WIDE_COUNTS = ("documents", "chunks", "vectors", "queue", "index")


def status(ctx: ToolContext, args: a.NoArguments) -> Result:
    # The engine's status is passed through whole: it is the engine's to define (docs/engine-api.md).
    engine = ctx.engine.status()
    if ctx.principal.limited:
        engine = {key: value for key, value in engine.items() if key not in ENGINE_WIDE_COUNTS}
    return {"bridge": {"version": __version__}, "engine": engine}


def jobs(ctx: ToolContext, args: JobsArguments) -> Result:
    raw = ctx.engine.list_jobs(args.status, args.limit)
    listed = [shapes.job(j) for j in shapes.listed(raw, "jobs")]
    if ctx.principal.limited:
        # Jobs carry no collection: a limited token sees those whose document is in its collections.
        listed = [job for job in listed if _job_visible(ctx, job)]
        return {"jobs": listed, "total": len(listed)}
    total = raw.get("total")
    return {"jobs": listed, "total": total if isinstance(total, int) else len(listed)}


def _job_visible(ctx: ToolContext, job: dict[str, object]) -> bool:
    document_id = job["document_id"]
    if not isinstance(document_id, int):
        return False
    try:
        reach.visible_document(ctx.engine, ctx.principal, document_id)
    except NotFound:
        return False
    return True


def render_status(result: Result) -> str:
    """A short summary for people: versions, model, what is stored, the queue."""
    engine = result["engine"]
    model = engine.get("model")
    name = model.get("name") if isinstance(model, dict) else None
    device = engine.get("device")
    docs = engine.get("documents") if isinstance(engine.get("documents"), dict) else {}
    queue = engine.get("queue") if isinstance(engine.get("queue"), dict) else {}
    modes = ", ".join(engine.get("search_modes") or []) or "?"
    lines = [
        f"kb-bridge {result['bridge']['version']}, engine {engine.get('version', '?')}",
        f"Model: {name or 'none (full-text search only)'}" + (f" on {device}" if name and device else "") + f"; search modes: {modes}",
        f"Documents: {docs.get('total', '?')} ({docs.get('notes', '?')} notes, {docs.get('files', '?')} files), "
        f"{engine.get('chunks', '?')} chunks",
        "Queue: " + ", ".join(f"{queue.get(state, 0)} {state}" for state in ("queued", "running", "done", "failed")),
    ]
    return "\n".join(lines)


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
