"""kb_related: chunks from other documents that say something similar, optionally with context."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kb_bridge import collection_tags, shapes
from kb_bridge.errors import Conflict, EngineUnsupported, InvalidArgument, NotFound
from kb_bridge.tools import arguments as a
from kb_bridge.tools import reach, render
from kb_bridge.tools.spec import Result, ToolContext, ToolSpec

# How many more related chunks a collection-limited token asks an engine before 3.16 for (one that cannot filter
# them by tag), to keep enough after leaving out the other collections' (bounded by the engine's top_n limit).
OVERFETCH = 5
MAX_ASKED = 100


@dataclass(frozen=True, kw_only=True)
class RelatedArguments:
    chunk_id: int | None = a.field(a.DOCUMENT_ID, default=None)
    document_id: int | None = a.field(a.DOCUMENT_ID, default=None)
    top: int = a.field({"type": "integer", "minimum": 1, "maximum": 20}, default=5)
    context: bool = a.field(a.BOOLEAN, default=False)


CONTEXT = shapes.nullable({"type": "object", "properties": {"before": shapes.OPT_STR, "after": shapes.OPT_STR}})
RELATED_OUTPUT = shapes.result(
    {
        "source": shapes.obj({"chunk_id": shapes.INT, "document_id": shapes.INT}),
        "results": {"type": "array", "items": {**shapes.CHUNK, "properties": {**shapes.CHUNK["properties"], "context": CONTEXT}}},
    }
)


def related(ctx: ToolContext, args: RelatedArguments) -> Result:
    if args.chunk_id is not None and args.document_id is None:
        chunk_id = args.chunk_id
    elif args.document_id is not None and args.chunk_id is None:
        chunk_id = _first_chunk(ctx, args.document_id)
    else:
        raise InvalidArgument("chunk_id", "give exactly one of chunk_id or document_id")
    source = shapes.chunk(reach.visible_chunk(ctx.engine, ctx.principal, chunk_id))
    try:
        hits = _within_reach(ctx, chunk_id, args.top) if ctx.principal.limited else _hits(ctx, chunk_id, args.top)
    except Conflict:
        raise EngineUnsupported("related chunks need the engine's vector index, and it has none (full-text only)") from None
    documents: dict[int, list[dict[str, Any]]] = {}
    for hit in hits:
        hit["context"] = _context(ctx, hit, documents) if args.context else None
    return {"source": {"chunk_id": source["chunk_id"], "document_id": source["document_id"]}, "results": hits}


def _hits(ctx: ToolContext, chunk_id: int, top: int, tag: str | None = None) -> list[dict[str, Any]]:
    raw = ctx.engine.related_chunks(chunk_id, top, tags=(tag,) if tag else ())
    if tag is not None and raw.get("tags") != [tag]:
        raise EngineUnsupported("related chunks within a collection need engine 3.16")
    return [shapes.chunk(hit) for hit in shapes.listed(raw, "results")]


def _within_reach(ctx: ToolContext, chunk_id: int, top: int) -> list[dict[str, Any]]:
    """A limited token's related chunks: the engine asked within each of its collections (3.16), merged by score as
    kb_search merges; an engine before asked once for more, and the hits in the token's collections kept, which
    could leave a small collection beside a large one with fewer than it holds."""
    try:
        batches = [_hits(ctx, chunk_id, top, collection_tags.tag_for(str(name)))
                   for name in reach.collections_to_search(ctx.principal, None)]
    except EngineUnsupported:
        batches = [_hits(ctx, chunk_id, min(MAX_ASKED, top * OVERFETCH))]
    return reach.merged_by_score(ctx.principal, batches, top)


def _first_chunk(ctx: ToolContext, document_id: int) -> int:
    chunks = shapes.document(reach.visible_document(ctx.engine, ctx.principal, document_id), full=True)["chunks"]
    if not chunks:
        raise NotFound(f"document {document_id} has no chunks yet")
    return int(min(chunks, key=lambda c: c["index"])["id"])


def _context(ctx: ToolContext, hit: dict[str, Any], documents: dict[int, list[dict[str, Any]]]) -> dict[str, str | None]:
    """The chunks just before and after a hit, from its document (fetched once per call)."""
    document_id = hit["document_id"]
    if document_id not in documents:
        documents[document_id] = shapes.document(ctx.engine.get_document(document_id), full=True)["chunks"]
    by_index = {c["index"]: c["text"] for c in documents[document_id]}
    index = hit["chunk_index"]
    if index is None:
        return {"before": None, "after": None}
    return {"before": by_index.get(index - 1), "after": by_index.get(index + 1)}


def render_related(result: Result) -> str:
    lines = [f"{len(result['results'])} chunk(s) related to chunk #{result['source']['chunk_id']}:"]
    for hit in result["results"]:
        score = f"{hit['score']:.3f}" if isinstance(hit.get("score"), (int, float)) else "-"
        lines.append(
            f"\n- {render.title(hit.get('title') or '(untitled)')} — document #{hit['document_id']} chunk #{hit['chunk_id']}"
            f" score {score}\n{render.clip(hit['text'], 800)}"
        )
        context = hit.get("context") or {}
        if context.get("before"):
            lines.append(f"  (before) {render.clip(context['before'], 300)}")
        if context.get("after"):
            lines.append(f"  (after) {render.clip(context['after'], 300)}")
    return "\n".join(lines)


TOOLS = [
    ToolSpec(
        name="kb_related",
        description="Chunks of other documents closest in meaning to a chunk (or a document's first chunk); "
        "context=true adds each hit's neighbouring chunks.",
        arguments=RelatedArguments,
        output_schema=RELATED_OUTPUT,
        handler=related,
        render=render_related,
        read_only=True,
        idempotent=True,
    )
]
