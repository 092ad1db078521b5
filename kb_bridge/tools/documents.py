"""kb_get: fetch documents by id (with content and chunks) or by source path."""

from __future__ import annotations

from dataclasses import dataclass

from kb_bridge import shapes
from kb_bridge.errors import EngineUnsupported, InvalidArgument, NotFound
from kb_bridge.tools import arguments as a
from kb_bridge.tools import reach, render
from kb_bridge.tools.spec import Result, ToolContext, ToolSpec


@dataclass(frozen=True, kw_only=True)
class GetArguments:
    document_id: int | None = a.field(a.DOCUMENT_ID, default=None)
    source_path: str | None = a.field(a.SOURCE_PATH, default=None)
    version: int | None = a.field(a.VERSION, default=None)


GET_OUTPUT = shapes.result({"documents": {"type": "array", "items": shapes.VERSIONED_DOCUMENT}})

# A source path should name one document; a page this size is plenty and bounds the reply.
_SOURCE_PATH_LIMIT = 50


def get(ctx: ToolContext, args: GetArguments) -> Result:
    # "Exactly one of" is checked here rather than with oneOf: several clients reject
    # top-level oneOf/anyOf in tool input schemas.
    if (args.document_id is None) == (args.source_path is None):
        raise InvalidArgument("document_id", "give exactly one of document_id or source_path")
    if args.document_id is not None:
        raw = reach.visible_document(ctx.engine, ctx.principal, args.document_id)
        if args.version is not None and args.version != raw.get("version"):
            raw = reach.visible_version(ctx.engine, ctx.principal, args.document_id, args.version)
        document = shapes.document(raw, full=True)
        document["versions"] = _versions(ctx, document)
        return {"documents": [document]}
    if args.version is not None:
        raise InvalidArgument("version", "give version with document_id, not source_path")
    raw_list, _total, _next = reach.page_of_documents(
        ctx.engine, ctx.principal, [("source_path", args.source_path)], None, (), _SOURCE_PATH_LIMIT, None
    )
    return {"documents": [shapes.document(d) for d in raw_list]}


def _versions(ctx: ToolContext, document: Result) -> list[dict[str, object]]:
    """A note's kept versions the principal may read, newest first; none for a file or from an engine before
    3.9 (no such path)."""
    if document["doc_type"] != "note":
        return []
    try:
        return shapes.versions(reach.visible_versions(ctx.principal, ctx.engine.list_versions(document["id"])))
    except (NotFound, EngineUnsupported):
        return []


def render_get(result: Result) -> str:
    return render.documents(result["documents"], empty="No document has that source_path.")


TOOLS = [
    ToolSpec(
        name="kb_get",
        description=(
            "One document by document_id (full text, chunks, a note's versions; version: that earlier text, "
            "to restore with kb_update_note) or the documents at an exact source_path (metadata). Exactly one "
            "of the two."
        ),
        arguments=GetArguments,
        output_schema=GET_OUTPUT,
        handler=get,
        render=render_get,
        read_only=True,
        idempotent=True,
    )
]




@dataclass(frozen=True, kw_only=True)
class DeleteArguments:
    document_id: int = a.field(a.DOCUMENT_ID)


DELETE_OUTPUT = shapes.result({"document_id": shapes.INT, "deleted": shapes.BOOL})


def delete(ctx: ToolContext, args: DeleteArguments) -> Result:
    """Deleting is idempotent in outcome: a document already gone reports deleted=false, no error."""
    document_id = args.document_id
    try:
        if ctx.principal.limited:
            reach.retried_on_change(lambda: _delete_in_reach(ctx, document_id))
        else:
            ctx.engine.delete_document(document_id)
    except NotFound:
        return {"document_id": document_id, "deleted": False}
    return {"document_id": document_id, "deleted": True}


def _delete_in_reach(ctx: ToolContext, document_id: int) -> None:
    """A document in another collection does not exist for a limited token: NOT_FOUND, nothing to delete. The
    delete holds to the version found in its reach (If-Match, engine 3.15), so one moved out meanwhile stays."""
    seen = reach.visible_document(ctx.engine, ctx.principal, document_id)
    ctx.engine.delete_document(document_id, if_match=shapes.document(seen)["version"])


def render_delete(result: Result) -> str:
    if result["deleted"]:
        return f"Deleted document #{result['document_id']}."
    return f"Document #{result['document_id']} does not exist (already deleted?); nothing to do."


TOOLS.append(
    ToolSpec(
        name="kb_delete",
        description="Delete a document (note or file) and its chunks for good; one already gone is not an error.",
        arguments=DeleteArguments,
        output_schema=DELETE_OUTPUT,
        handler=delete,
        render=render_delete,
        read_only=False,
        destructive=True,
        idempotent=True,
    )
)
