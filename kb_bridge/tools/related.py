"""kb_related: chunks from other documents that say something similar, optionally with context."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kb_bridge import shapes
from kb_bridge.errors import Conflict, EngineUnsupported, InvalidArgument, NotFound
from kb_bridge.tools import arguments as a
from kb_bridge.tools import reach, render
from kb_bridge.tools.spec import Result, ToolContext, ToolSpec

# How many more related chunks a collection-limited token asks the engine for, to keep enough after
# leaving out the other collections' (bounded by the engine's top_n limit).
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
    # A limited token asks for more, then keeps the hits in its own collections.
    asked = min(MAX_ASKED, args.top * OVERFETCH) if ctx.principal.limited else args.top
    try:
        raw = ctx.engine.related_chunks(chunk_id, asked)
    except Conflict:
        raise EngineUnsupported("related chunks need the engine's vector index, and it has none (full-text only)") from None
    hits = [shapes.chunk(hit) for hit in shapes.listed(raw, "results")]
    hits = [hit for hit in hits if ctx.principal.sees(hit["collection"])][: args.top]
    documents: dict[int, list[dict[str, Any]]] = {}
    for hit in hits:
        hit["context"] = _context(ctx, hit, documents) if args.context else None
    return {"source": {"chunk_id": source["chunk_id"], "document_id": source["document_id"]}, "results": hits}


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
