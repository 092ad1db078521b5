"""POST /api/v1/search and the chunk endpoints (fetch, related)."""

from __future__ import annotations

from flask import Blueprint

from ..errors import NotFound
from ..search.searcher import MODES, SearchRequest
from ..store.base import DocumentFilter
from . import current_engine, validation
from .times import time_bounds

blueprint = Blueprint("search", __name__)

MAX_QUERY_CHARS = 4000
MAX_TOP_N = 100


@blueprint.post("/api/v1/search")
def search_chunks() -> dict[str, object]:
    engine = current_engine()
    body = validation.json_object(engine.config.max_json_bytes)
    query = validation.string(body, "query", required=True, max_chars=MAX_QUERY_CHARS)
    mode = validation.choice(body, "mode", "hybrid", MODES)
    if validation.boolean(body, "fts_only", False):
        mode = "fts"
    bounds = time_bounds(body)
    where = DocumentFilter(
        tags=validation.tags(body.get("tags")),
        doc_type=validation.string(body, "doc_type", max_chars=50),
        **bounds,
    )
    top_n = validation.integer(body, "top_n", 10, 1, MAX_TOP_N)
    found = engine.searcher.search(SearchRequest(query=str(query), top_n=top_n, where=where, mode=mode))
    # Says the bounds were applied (3.8): a client can tell this engine from one that ignores them.
    return {**found, "time_filters": bounds}


@blueprint.get("/api/v1/chunks/<id:chunk_id>")
def get_chunk(chunk_id: int) -> dict[str, object]:
    chunk = current_engine().store.get_chunks([chunk_id]).get(chunk_id)
    if chunk is None:
        raise NotFound(f"chunk {chunk_id} not found")
    return chunk


@blueprint.get("/api/v1/chunks/<id:chunk_id>/related")
def related_chunks(chunk_id: int) -> dict[str, object]:
    top_n = validation.arg_int("top_n", 5, 1, MAX_TOP_N)
    same_document = validation.arg_bool("same_document", False)
    tags = validation.arg_tags()
    found = current_engine().searcher.related(chunk_id, top_n, same_document, DocumentFilter(tags=tags))
    # Says the tags were applied (3.16): an engine before ignores `tag`, and a client limited to a collection then
    # has to ask for more and keep its own.
    return {**found, "tags": list(tags)} if tags else found
