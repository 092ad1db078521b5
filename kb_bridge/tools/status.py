"""kb_status and kb_jobs: engine health and the ingestion queue."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from kb_bridge import __version__, shapes
from kb_bridge.auth.principal import Principal
from kb_bridge.client.engine import EngineClient
from kb_bridge.tools import arguments as a
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


# What a collection-limited token sees of the engine's status: what the engine is and can do, never what it
# holds (any count, of documents, chunks, vectors, the queue or the indexes, would tell what the other
# collections hold). An allow-list, so that a field an engine adds stays hidden until judged here: `None`
# keeps the value whole, a nested mapping keeps only its own keys of an object.
AllowedFields: TypeAlias = "Mapping[str, AllowedFields | None]"
LIMITED_STATUS_FIELDS: AllowedFields = {
    "version": None, "api": None, "device": None, "search_modes": None, "store": None,
    "model": {"name": None, "dim": None, "batch_size": None, "document_workers": None,
              "precision": {"documents": None, "queries": None}},
    "embedder": {"state": None, "reason": None},
}


def status(ctx: ToolContext, args: a.NoArguments) -> Result:
    # The engine's status is passed through whole: it is the engine's to define (docs/engine-api.md).
    engine = ctx.engine.status()
    if ctx.principal.limited:
        engine = allowed_fields(engine, LIMITED_STATUS_FIELDS)
    return {"bridge": {"version": __version__}, "engine": engine}


def allowed_fields(value: Mapping[str, Any], allowed: AllowedFields) -> dict[str, Any]:
    """The fields of `value` that `allowed` lists, nested objects filtered by their own lists. A nested list
    over a value that is not an object keeps it only when it is null (`"model": null`: no model)."""
    kept: dict[str, Any] = {}
    for key, nested in allowed.items():
        if key not in value:
            continue
        item = value[key]
        if nested is None or item is None:
            kept[key] = item
        elif isinstance(item, dict):
            kept[key] = allowed_fields(item, nested)
    return kept


def jobs(ctx: ToolContext, args: JobsArguments) -> Result:
    listed, total, _read = visible_jobs(ctx.engine, ctx.principal, args.status, args.limit)
    return {"jobs": listed, "total": len(listed) if total is None else total}


def visible_jobs(
    engine: EngineClient, principal: Principal, status: str | None, limit: int, offset: int = 0,
) -> tuple[list[dict[str, Any]], int | None, int]:
    """(the jobs of the engine's page at `offset` that the principal may see, the engine's total or None when
    the principal sees only some jobs, how many jobs the engine's page held): kb_jobs and the console's jobs
    page, which pages by the engine's offsets."""
    raw = engine.list_jobs(status, limit, offset)
    listed = [shapes.job(j) for j in shapes.listed(raw, "jobs")]
    read = len(listed)
    if principal.limited:
        # The rule every job view shares (reach.job_visible): where its document is, else where it files.
        documents: dict[int, bool] = {}
        return [job for job in listed if reach.job_visible(engine, principal, job, documents)], None, read
    total = raw.get("total")
    return listed, total if isinstance(total, int) else None, read


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
    ]
    if "documents" not in engine and "queue" not in engine:
        # A collection-limited token gets no engine-wide counts (kb_collections counts its own).
        return "\n".join(lines)
    lines += [
        f"Documents: {docs.get('total', '?')} ({docs.get('notes', '?')} notes, {docs.get('files', '?')} files), "
        f"{engine.get('chunks', '?')} chunks",
        "Queue: " + ", ".join(f"{queue.get(state, 0)} {state}" for state in ("queued", "running", "done", "failed", "cancelled")),
    ]
    return "\n".join(lines)


def render_jobs(result: Result) -> str:
    if not result["jobs"]:
        return "No jobs."
    return f"{len(result['jobs'])} of {result['total']} job(s):\n" + "\n".join(render.job_line(j) for j in result["jobs"])


TOOLS = [
    ToolSpec(
        name="kb_status",
        description="Engine health: version, embedding model, device, document and chunk counts, queue.",
        arguments=a.NoArguments,
        output_schema=STATUS_OUTPUT,
        handler=status,
        render=render_status,
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="kb_jobs",
        description="Recent ingestion jobs, newest first, optionally of one status.",
        arguments=JobsArguments,
        output_schema=JOBS_OUTPUT,
        handler=jobs,
        render=render_jobs,
        read_only=True,
        idempotent=True,
    ),
]
