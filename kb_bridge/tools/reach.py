"""What a principal can reach: the collections a token is limited to (a static token's `collections`, a
JWT's `kb_collections` claim), applied to every read and write before or around the engine calls.

For a limited principal, a document in another collection does not exist: reading it is NOT_FOUND with
the very message a missing one gets, listings and counts leave it out, searches never return it. A write
into another collection is FORBIDDEN before any engine call; an update or delete of a document elsewhere
reads it first (to learn its collection) and then behaves as for a missing document. A job belongs where its
document is, or, before it has one, where it files (job_visible: kb_jobs and the console's job pages alike,
decided from the job itself, never from anything the caller sends). An unlimited principal
(every principal without such a limit) costs nothing extra: each helper passes straight through.

The engine filters by tags that must all match, so a principal limited to several collections is served by
one engine call per collection: searches are merged by score, listings by update time with one cursor for
all of them (tools/cursors.py; docs/architecture.md, "Authorization").
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from kb_bridge import collection_tags, shapes
from kb_bridge.auth.principal import Principal
from kb_bridge.client.engine import EngineClient
from kb_bridge.errors import Conflict, EngineBadResponse, Forbidden, InvalidArgument, NotFound
from kb_bridge.tools import cursors

Params = list[tuple[str, Any]]
T = TypeVar("T")

# How many times in all a limited token's write is tried (below).
LIMITED_ATTEMPTS = 3


def require_writable(principal: Principal, collection: str) -> None:
    """FORBIDDEN, before any engine call, for a write into a collection the principal does not have."""
    if not principal.sees(collection):
        allowed = ", ".join(sorted(principal.collections or ()))
        raise Forbidden(
            f"this token may only write to its own collections ({allowed or 'none'}); {collection!r} is not one of them",
            collection=collection,
        )


def visible_document(engine: EngineClient, principal: Principal, document_id: int) -> dict[str, Any]:
    """The engine's document, or NOT_FOUND (the engine's own wording) when it is outside the principal's reach."""
    raw = engine.get_document(document_id)
    if principal.limited and not principal.sees(shapes.document(raw)["collection"]):
        raise NotFound(f"document {document_id} not found")
    return raw


def retried_on_change(write: Callable[[], T]) -> T:
    """Run a limited token's write, which reads the document (checking that it is in the token's reach) and
    writes holding to the version it read (If-Match), so that a document another caller moves out in between is
    never written. Another change landing there is a version conflict the caller did not ask for, so the write
    is tried again from a fresh read: a document moved out is then NOT_FOUND, one merely changed is written, as
    an unlimited token's write simply lands."""
    for _ in range(LIMITED_ATTEMPTS - 1):
        try:
            return write()
        except Conflict as exc:
            if exc.details.get("reason") != "version_mismatch" and "current_version" not in exc.details:
                raise
    return write()


def visible_version(engine: EngineClient, principal: Principal, document_id: int, version: int) -> dict[str, Any]:
    """An earlier version of a document the principal reaches, or NOT_FOUND when that version was kept in a
    collection outside its reach: a note moved into the principal's collection brings no text it held elsewhere."""
    raw = engine.get_version(document_id, version)
    if principal.limited and not principal.sees(shapes.document(raw)["collection"]):
        raise NotFound(f"version {version} of document {document_id} not found")
    return raw


def visible_versions(principal: Principal, raw: Any) -> Any:
    """An engine's versions answer without the versions kept in collections outside the principal's reach
    (as visible_version refuses to read them); untouched for an unlimited principal or an answer of another
    shape (shapes.versions judges that)."""
    if not principal.limited or not isinstance(raw, Mapping) or not isinstance(raw.get("versions"), list):
        return raw
    kept = [v for v in raw["versions"]
            if isinstance(v, Mapping) and principal.sees(shapes.document_collection(v))]
    return {**raw, "versions": kept}


def visible_chunk(engine: EngineClient, principal: Principal, chunk_id: int) -> dict[str, Any]:
    raw = engine.get_chunk(chunk_id)
    if principal.limited and not principal.sees(shapes.chunk(raw)["collection"]):
        raise NotFound(f"chunk {chunk_id} not found")
    return raw


def job_visible(
    engine: EngineClient, principal: Principal, job: Mapping[str, Any], documents: dict[int, bool] | None = None,
) -> bool:
    """Whether a job (as shapes.job gives it) exists for the principal, decided from the job alone: a job with
    a document is where that document is now (a document moved away, or deleted, takes its job with it); a
    job without one yet (queued, running, failed) is in the collection it files into, which the engine's job
    `tags` say (engine 3.7). An engine that does not say leaves the job in no collection: fail closed.
    `documents` caches the document checks of one listing."""
    if not principal.limited:
        return True
    document_id = job.get("document_id")
    if not isinstance(document_id, int):
        return principal.sees(job.get("collection"))
    if documents is not None and document_id in documents:
        return documents[document_id]
    try:
        visible_document(engine, principal, document_id)
        seen = True
    except NotFound:
        seen = False
    if documents is not None:
        documents[document_id] = seen
    return seen


def visible_job(engine: EngineClient, principal: Principal, job_id: int) -> dict[str, Any]:
    """The job (shaped), or NOT_FOUND with the very message a missing job gets when it is outside the
    principal's reach (job_visible)."""
    found = shapes.job(engine.get_job(job_id))
    if not job_visible(engine, principal, found):
        raise NotFound(f"job {job_id} not found")
    return found


def collections_to_search(principal: Principal, requested: str | None) -> list[str | None]:
    """The collection filter of each engine search to run: [requested] (or [None]: everything) for an
    unlimited principal; for a limited one its collections, or none at all when it asks for another."""
    if not principal.limited:
        return [requested]
    if requested is not None:
        return [requested] if principal.sees(requested) else []
    return [*sorted(principal.collections or ())]


def merged_by_score(principal: Principal, batches: Sequence[list[dict[str, Any]]], top: int) -> list[dict[str, Any]]:
    """The best `top` hits of several searches' hits (each best first) that the principal may see, each chunk
    once: a document tagged into two of the collections searched is found by both searches. The engine filtered
    by the collection's tag, but a hit kb_get would refuse (moved out while the search ran, or tagged into
    another collection as well, which its first collection tag names) is left out."""
    batches = [[hit for hit in batch if principal.sees(hit["collection"])] for batch in batches]
    if len(batches) == 1:
        return batches[0][:top]
    hits = [hit for batch in batches for hit in batch]
    # Equal scores by the lower chunk id, as the engine orders each batch (not by collection name).
    hits.sort(key=lambda hit: (-_score(hit), _chunk_id(hit)))
    seen: set[object] = set()
    merged = []
    for hit in hits:
        if hit.get("chunk_id") not in seen:
            seen.add(hit.get("chunk_id"))
            merged.append(hit)
    return merged[:top]


def _score(hit: dict[str, Any]) -> float:
    score = hit.get("score")
    return float(score) if isinstance(score, (int, float)) else float("-inf")


def _chunk_id(hit: dict[str, Any]) -> int:
    chunk_id = hit.get("chunk_id")
    return chunk_id if isinstance(chunk_id, int) else 0


# --- pages of documents ------------------------------------------------------------------------


def page_of_documents(
    engine: EngineClient, principal: Principal, params: Params, collection: str | None, tags: Sequence[str],
    limit: int, cursor: cursors.Cursor | None, field: str = "cursor", filters: Mapping[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], int, str | None]:
    """One page of the engine's documents the principal may see: (raw documents, total, next cursor).

    `params` are the engine filters other than tags; `collection` and `tags` filter as in kb_list. The cursor
    (tools/cursors.py) holds the last document's key where the engine pages by key (3.14), so documents added,
    deleted or updated before it move nothing after it; an older engine's cursor holds an offset. `filters` are
    the listing's as the caller gave them (none by default), which a cursor carries: one of another listing is
    refused (`params` cannot serve, as a span, `since: 7d`, is a new bound at each call).

    The engine filters by a collection's tag; a document tagged into another collection too, which its first
    collection tag names, is one kb_get refuses, so it is left out of the page as merged_by_score leaves it out
    of a search (a page may then hold fewer than `limit`; the cursor goes on from the last document read, and
    `total` is the engine's count)."""
    page, total, following = _page(engine, principal, params, collection, tags, limit, cursor, field, dict(filters or {}))
    if principal.limited:
        page = [doc for doc in page if principal.sees(shapes.document(doc)["collection"])]
    return page, total, following


def _page(
    engine: EngineClient, principal: Principal, params: Params, collection: str | None, tags: Sequence[str],
    limit: int, cursor: cursors.Cursor | None, field: str, filters: dict[str, Any],
) -> tuple[list[dict[str, Any]], int, str | None]:
    names = collections_to_search(principal, collection)
    user_tags = collection_tags.check_user_tags(tags)
    if cursor is not None and cursor.filters != filters:
        raise InvalidArgument(field, "was returned for a listing with other filters")
    position = cursor.position if cursor is not None else None
    if not names:
        return [], 0, None
    if len(names) == 1:
        if isinstance(position, dict):
            raise InvalidArgument(field, "is not a cursor this server returned (for this token)")
        tag_params = [("tag", t) for t in collection_tags.tags_with_collection(names[0], user_tags)]
        docs, total, keyed = _listing(engine, [*params, *tag_params], limit, position)
        page = docs[:limit]
        if len(docs) <= limit:
            return page, total, None
        offset = position if isinstance(position, int) else 0
        return page, total, _next_cursor(keyed, page[-1], position, offset + len(page), filters)
    return _merged_page(engine, params, [n for n in names if n is not None], user_tags, limit, position, field,
                        filters)


def _listing(
    engine: EngineClient, params: Params, limit: int, position: cursors.Key | int | None,
) -> tuple[list[dict[str, Any]], int, bool]:
    """(documents, total, whether the engine pages by key) of one engine listing from `position`. It asks for
    one document more than a page: whether that one comes says whether another page follows (a total read
    earlier cannot: documents come and go between pages)."""
    where = [("after", position.param())] if isinstance(position, cursors.Key) else [("offset", position or 0)]
    raw = engine.list_documents([*params, ("limit", limit + 1), *where])
    docs = shapes.listed(raw, "documents")
    total = raw.get("total")
    # An engine that knows `after` says so in every listing's answer (null when not asked).
    return docs, total if isinstance(total, int) else len(docs), "after" in raw


def _merged_page(
    engine: EngineClient, params: Params, names: list[str], tags: list[str], limit: int,
    position: cursors.Position | None, field: str, filters: Mapping[str, Any],
) -> tuple[list[dict[str, Any]], int, str | None]:
    """One page of several collections' listings, merged newest update first (one engine call each)."""
    if isinstance(position, int):
        raise InvalidArgument(field, "is not a cursor this server returned (for this token)")
    key = position if isinstance(position, cursors.Key) else None
    offsets = cursors.offsets_for(position, names, field) if key is None else {}
    pages: dict[str, list[dict[str, Any]]] = {}
    total = 0
    keyed = True
    for name in names:
        tag_params = [("tag", t) for t in collection_tags.tags_with_collection(name, tags)]
        # One key serves every collection: each listing is in the one order the merge keeps.
        docs, count, by_key = _listing(engine, [*params, *tag_params], limit, key or offsets[name])
        pages[name], total, keyed = docs, total + count, keyed and by_key
    merged = heapq.merge(*[[(_update_key(doc), name, doc) for doc in page] for name, page in pages.items()],
                         key=lambda item: item[0], reverse=True)
    taken: list[dict[str, Any]] = []
    for _key, name, doc in merged:
        # A document tagged into two of the collections comes from both listings, next to each other in the
        # merge (one key): it is shown once, and each listing's offset passes it.
        duplicate = bool(taken) and taken[-1].get("id") == doc.get("id")
        if len(taken) == limit and not duplicate:
            break
        if not duplicate:
            taken.append(doc)
        if key is None:
            offsets[name] += 1
    if sum(len(page) for page in pages.values()) <= limit:
        return taken, total, None
    return taken, total, _next_cursor(keyed, taken[-1], position, offsets, filters)


def _next_cursor(keyed: bool, last: dict[str, Any], position: cursors.Position | None,
                 offsets: int | dict[str, int], filters: Mapping[str, Any]) -> str:
    """The cursor after `last`: its key where the engine pages by key, else the offset(s) reached."""
    key = cursors.key_of(last) if keyed else None
    if key is not None:
        return cursors.encode(key, filters)
    if isinstance(position, cursors.Key):
        # This walk came by key, so no offset is known to go on from.
        raise EngineBadResponse("the kb engine listed a document whose updated_at is not a timestamp in the API's form")
    return cursors.encode(offsets, filters)


def _update_key(doc: dict[str, Any]) -> tuple[str, int]:
    updated = doc.get("updated_at")
    ident = doc.get("id")
    return (updated if isinstance(updated, str) else "", ident if isinstance(ident, int) else 0)
