"""kb_search: hybrid / full-text / vector search over the knowledge base."""

from __future__ import annotations

from typing import Any

from kb_bridge import collections, shapes
from kb_bridge.tools import args, render
from kb_bridge.tools.spec import Arguments, Result, ToolContext, ToolSpec

DESCRIPTION = (
    "Search the knowledge base; returns the best-matching chunks with their document ids. "
    "collection scopes it (e.g. memory, documents); tags must all match. "
    "For a complex question, search 2-3 differently phrased queries and merge the results by "
    "chunk_id; then rerank by reading them yourself. mode: hybrid (default), fts (exact words), vector (meaning)."
)

INPUT = args.arguments(
    {
        "query": args.QUERY,
        "top": args.TOP,
        "tags": args.TAGS,
        "doc_type": args.DOC_TYPE,
        "collection": args.COLLECTION,
        "fts_only": {"type": "boolean"},
        "mode": args.MODE,
    },
    required=("query",),
)

OUTPUT = shapes.obj({"query": shapes.STR, "mode": shapes.STR, "results": {"type": "array", "items": shapes.CHUNK}})


def engine_request(arguments: Arguments) -> dict[str, Any]:
    """The engine's search body for these (validated) arguments."""
    body: dict[str, Any] = {"query": arguments["query"], "top_n": arguments.get("top", 10)}
    tags = collections.tags_with_collection(arguments.get("collection"), arguments.get("tags", []))
    if tags:
        body["tags"] = tags
    for key in ("doc_type", "mode", "fts_only"):
        if key in arguments:
            body[key] = arguments[key]
    return body


def search(ctx: ToolContext, arguments: Arguments) -> Result:
    raw = ctx.engine.search(engine_request(arguments))
    mode = raw.get("mode") if isinstance(raw.get("mode"), str) else ("fts" if arguments.get("fts_only") else "hybrid")
    return {
        "query": arguments["query"],
        "mode": mode,
        "results": [shapes.chunk(hit) for hit in shapes.listed(raw, "results")],
    }


TOOLS = [
    ToolSpec(
        name="kb_search",
        title="Search the knowledge base",
        description=DESCRIPTION,
        input_schema=INPUT,
        output_schema=OUTPUT,
        handler=search,
        render=render.search_results,
        read_only=True,
        idempotent=True,
    )
]
