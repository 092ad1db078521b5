"""kb_search: hybrid / full-text / vector search over the knowledge base."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kb_bridge import collection_tags, shapes
from kb_bridge.errors import InvalidArgument
from kb_bridge.tools import arguments as a
from kb_bridge.tools import reach, render, time_range
from kb_bridge.tools.spec import Result, ToolContext, ToolSpec

DESCRIPTION = (
    "Search the knowledge base: the best-matching chunks, with their document ids. collection scopes it "
    "(memory, documents, ...); tags must all match. For a complex question search 2-3 phrasings, merge by "
    "chunk_id, then rerank by reading. mode: hybrid (default), fts (exact words), vector (meaning). "
    "since/until filter on time_field."
)


@dataclass(frozen=True, kw_only=True)
class SearchArguments:
    query: str = a.field(a.QUERY)
    top: int = a.field(a.TOP, default=10)
    tags: tuple[str, ...] = a.field(a.TAGS, default=())
    doc_type: str | None = a.field(a.DOC_TYPE, default=None)
    collection: str | None = a.field(a.COLLECTION, default=None)
    fts_only: bool | None = a.field(a.BOOLEAN, default=None)
    mode: str | None = a.field(a.MODE, default=None)
    since: str | None = a.field(a.TIME, default=None, description=a.SINCE_HELP)
    until: str | None = a.field(a.TIME, default=None, description=a.UNTIL_HELP)
    time_field: str = a.field(a.TIME_FIELD, default="created")


OUTPUT = shapes.result({"query": shapes.STR, "mode": shapes.STR,
                        "results": {"type": "array", "items": shapes.SEARCH_HIT}})


def engine_request(args: SearchArguments, collection: str | None = None) -> dict[str, Any]:
    """The engine's search body for these (validated) arguments: only what the agent gave, plus top_n;
    `collection` (one the principal may see) replaces the argument's."""
    if args.fts_only and args.mode not in (None, "fts"):
        raise InvalidArgument("fts_only", f"true means mode fts, which contradicts mode {args.mode!r}; give one of the two")
    body: dict[str, Any] = {"query": args.query, "top_n": args.top}
    tags = collection_tags.tags_with_collection(collection if collection is not None else args.collection, args.tags)
    if tags:
        body["tags"] = tags
    for key in ("doc_type", "mode", "fts_only"):
        value = getattr(args, key)
        if value is not None:
            body[key] = value
    body.update(time_range.engine_bounds(args.since, args.until, args.time_field))
    return body


def search(ctx: ToolContext, args: SearchArguments) -> Result:
    """One engine search, or for a token limited to several collections one per collection, merged by score."""
    fallback = "fts" if args.fts_only else "hybrid"
    batches = []
    mode = None
    for collection in reach.collections_to_search(ctx.principal, args.collection):
        raw = ctx.engine.search(engine_request(args, collection))
        mode = mode or (raw.get("mode") if isinstance(raw.get("mode"), str) else None)
        batches.append([shapes.search_hit(hit) for hit in shapes.listed(raw, "results")])
    if not batches:
        engine_request(args)  # the same validation as any search, then nothing: no collection of its own is asked for
    return {"query": args.query, "mode": mode or fallback, "results": reach.merged_by_score(ctx.principal, batches, args.top)}


TOOLS = [
    ToolSpec(
        name="kb_search",
        description=DESCRIPTION,
        arguments=SearchArguments,
        output_schema=OUTPUT,
        handler=search,
        render=render.search_results,
        read_only=True,
        idempotent=True,
    )
]
