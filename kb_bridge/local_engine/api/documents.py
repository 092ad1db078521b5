"""Documents: list, fetch, delete, move (PATCH /documents/{id}); note updates (PATCH /notes); tags."""

from __future__ import annotations

from urllib.parse import quote

from flask import Blueprint, Response, jsonify, request, stream_with_context

from ..clock import now_iso
from ..errors import ValidationError
from ..store.base import DocumentFilter
from . import current_engine, validation
from .times import time_bounds

blueprint = Blueprint("documents", __name__)


@blueprint.get("/api/v1/documents")
def list_documents() -> dict[str, object]:
    engine = current_engine()
    bounds = time_bounds(request.args, request.args.get("updated_since") or None)
    where = DocumentFilter(
        tags=validation.arg_tags(),
        doc_type=validation.arg_string("doc_type"),
        source_path=validation.arg_string("source_path"),
        **bounds,
    )
    limit, offset = validation.page_args()
    # Keyset paging (3.14): a page after a document already listed, wherever the documents before it went.
    after = validation.listing_key("after")
    found, total = engine.store.list_documents(where, limit, offset, after)
    # `after` answered, even null, tells a client this engine knows it (the bridge's cursors do).
    return {"documents": found, "total": total, "time_filters": bounds,
            "after": f"{after[0]},{after[1]}" if after else None}


@blueprint.get("/api/v1/documents/<id:doc_id>")
def get_document(doc_id: int) -> Response:
    """The document with its text and chunks; `?version=N` one of its kept versions (its text, no chunks)."""
    store = current_engine().store
    version = request.args.get("version")
    if version is None:
        return _with_etag(store.get_document(doc_id, detail=True))
    return jsonify(store.get_version(doc_id, validation.query_number("version", version, 1, 2**31 - 1)))


@blueprint.get("/api/v1/documents/<id:doc_id>/versions")
def list_versions(doc_id: int) -> dict[str, object]:
    """The versions kept, newest (current) first, without their texts."""
    return {"id": doc_id, "versions": current_engine().store.list_versions(doc_id)}


@blueprint.put("/api/v1/documents/<id:doc_id>/versions")
def restore_versions(doc_id: int) -> dict[str, object]:
    """Replace a note's earlier versions (kb-bridge import bringing back an export's history)."""
    engine = current_engine()
    body = validation.json_object(engine.config.max_json_bytes)
    return engine.store.restore_versions(doc_id, validation.versions(body.get("versions")))


@blueprint.get("/api/v1/documents/<id:doc_id>/original")
def get_original(doc_id: int) -> Response:
    """A file's bytes as uploaded (streamed), or a note's text."""
    store = current_engine().store
    document = store.get_document(doc_id)
    if document.get("doc_type") == "note":
        text = store.get_document(doc_id, detail=True).get("content")
        return Response(text if isinstance(text, str) else "", content_type="text/plain; charset=utf-8",
                        headers={"Content-Disposition": _attachment(f"note-{doc_id}.txt")})
    filename, content_type, pieces = store.original(doc_id)
    return Response(stream_with_context(pieces), content_type=content_type,
                    headers={"Content-Disposition": _attachment(filename or f"document-{doc_id}")})


def _attachment(filename: str) -> str:
    """Content-Disposition for a stored file name: an ASCII fallback and the exact name (RFC 6266 / 8187)."""
    fallback = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in filename) or "file"
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


@blueprint.delete("/api/v1/documents/<id:doc_id>")
def delete_document(doc_id: int) -> tuple[str, int]:
    current_engine().store.delete_document(doc_id, if_match_versions())
    return "", 204


@blueprint.patch("/api/v1/notes/<id:doc_id>")
def update_note(doc_id: int) -> Response:
    engine = current_engine()
    body = validation.json_object(engine.config.max_json_bytes)
    text = validation.string(body, "text")
    title = validation.string(body, "title", max_chars=validation.MAX_TITLE_CHARS)
    if text is None and title is None:
        raise ValidationError("give text, title or both")
    document = engine.indexer.update_note(doc_id, text, title, if_match_versions(), validation.changed_by(body))
    return _with_etag(document)


@blueprint.patch("/api/v1/documents/<id:doc_id>")
def move_document(doc_id: int) -> Response:
    """A new source_path and/or title for any document, in place: nothing is re-read or re-embedded
    (`kb-bridge ingest` moves a renamed file's document this way)."""
    engine = current_engine()
    body = validation.json_object(engine.config.max_json_bytes)
    unknown = sorted(set(body) - {"source_path", "title"})
    if unknown:
        raise ValidationError(f"only source_path and title can be changed here, not {', '.join(unknown)}",
                              field=unknown[0])
    source_path = validation.string(body, "source_path", max_chars=validation.MAX_PATH_CHARS)
    title = validation.string(body, "title", max_chars=validation.MAX_TITLE_CHARS)
    if source_path is None and title is None:
        raise ValidationError("give source_path, title or both")
    return _with_etag(engine.store.move_document(doc_id, source_path, title, if_match_versions(), now_iso()))


@blueprint.post("/api/v1/documents/<id:doc_id>/tags")
def add_tags(doc_id: int) -> dict[str, object]:
    engine = current_engine()
    body = validation.json_object(engine.config.max_json_bytes)
    tags = validation.tags(body.get("tags"))
    if not tags:
        raise ValidationError("tags must hold at least one tag", field="tags")
    return engine.store.add_tags(doc_id, tags, now_iso())


@blueprint.patch("/api/v1/documents/<id:doc_id>/tags")
def patch_tags(doc_id: int) -> dict[str, object]:
    """Add and remove tags in one step: a move between collections is one change, one version step."""
    engine = current_engine()
    body = validation.json_object(engine.config.max_json_bytes)
    add = validation.tags(body.get("add"), "add")
    remove = validation.tags(body.get("remove"), "remove")
    if not add and not remove:
        raise ValidationError("give tags to add, to remove, or both")
    if set(add) & set(remove):
        raise ValidationError("a tag cannot be both added and removed", field="remove")
    return engine.store.patch_tags(doc_id, add, remove, if_match_versions(), now_iso())


# <path:...> so that a tag holding "/" (sent as %2F, which the server decodes) still reaches us whole.
@blueprint.delete("/api/v1/documents/<id:doc_id>/tags/<path:tag>")
def remove_tag(doc_id: int, tag: str) -> dict[str, object]:
    return current_engine().store.remove_tag(doc_id, tag, now_iso())


@blueprint.get("/api/v1/tags")
def list_tags() -> dict[str, object]:
    """Tags with their document counts; `within` (3.12) counts only the documents that carry that tag too
    (the console's tags per collection), and the answer names it, so that a client can tell an engine that
    ignored it."""
    within = validation.arg_string("within")
    found = current_engine().store.list_tags(validation.arg_string("prefix"),
                                             validation.check_tag(within, "within") if within else None)
    return {"tags": found, **({"within": within} if within else {})}


def if_match_versions() -> frozenset[str] | None:
    """The versions an If-Match header accepts: `"3"`, `3`, `W/"3"`, lists of them, or `*`."""
    header = request.headers.get("If-Match")
    if header is None:
        return None
    values = set()
    for item in header.split(","):
        item = item.strip()
        if item.startswith("W/"):
            item = item[2:]
        values.add(item.strip('"'))
    return frozenset(values)


def _with_etag(document: dict[str, object]) -> Response:
    response = jsonify(document)
    response.set_etag(str(document["version"]))
    return response
