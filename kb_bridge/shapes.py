"""The objects agents see (documents, chunks, jobs): their JSON schemas and the functions that
shape engine JSON into them, side by side so the two cannot drift apart.

Shaping is where engine tolerance lives (docs/engine-api.md, "What the bridge tolerates"): missing optional fields
become null, extra fields are dropped, and `collection:*` tags become the `collection` field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kb_bridge import collection_tags
from kb_bridge.errors import EngineBadResponse

# --- schema building blocks -----------------------------------------------------------------
#
# Portable JSON Schema only: one `type` per schema (a nullable value is `anyOf` a type and null, since
# clients that map schemas onto a single-type dialect reject type arrays), no bare `true`, no remote $ref.
# tests/test_schemas.py holds every published schema to these rules.

STR = {"type": "string"}
INT = {"type": "integer"}
BOOL = {"type": "boolean"}
NULL = {"type": "null"}


def nullable(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema, or null."""
    return {"anyOf": [dict(schema), NULL]}


OPT_STR = nullable(STR)
OPT_INT = nullable(INT)
OPT_NUM = nullable({"type": "number"})
TAGS = {"type": "array", "items": STR}


def obj(properties: Mapping[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """An object schema; `required` defaults to every property (results always carry them all).

    Objects that repeat inside lists (documents, chunks, jobs) pass `required=[]`: the list of
    names would double their size in tools/list, which agents pay for in tokens, and the shaping
    functions below always emit every field anyway.
    """
    schema: dict[str, Any] = {"type": "object", "properties": dict(properties)}
    names = list(properties) if required is None else required
    if names:
        schema["required"] = names
    return schema


# An error result's structured content: {"error": {"code", "message", ...details such as "field"}}. Kept
# small: it is repeated in every tool's outputSchema, which agents pay for in tokens.
ERROR = {"type": "object", "properties": {"code": STR, "message": STR}, "required": ["code", "message"]}


def result(properties: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's outputSchema: its result's fields, or on an error result (isError) only `error`.

    No `required` list at this level, so that an error result's structured content validates too (clients
    such as the TypeScript SDK check structuredContent against the outputSchema even when isError is
    true); the handlers always emit every field of a success result.
    """
    return {"type": "object", "properties": {**properties, "error": ERROR}}


DOCUMENT_FIELDS: dict[str, Any] = {
    "id": INT,
    "title": OPT_STR,
    "doc_type": OPT_STR,
    "source_path": OPT_STR,
    "collection": OPT_STR,
    "tags": TAGS,
    "chunk_count": OPT_INT,
    "version": OPT_INT,
    "created_at": OPT_STR,
    "updated_at": OPT_STR,
}
DOCUMENT = obj(DOCUMENT_FIELDS, required=[])
FULL_DOCUMENT = obj(
    {
        **DOCUMENT_FIELDS,
        "content": OPT_STR,
        "chunks": {"type": "array", "items": obj({"id": INT, "index": INT, "text": STR})},
    },
    required=[],
)
# kb_get's document: a note's kept versions, newest (the current one) first (engine 3.9).
VERSIONED_DOCUMENT = obj(
    {
        **FULL_DOCUMENT["properties"],
        "changed_by": OPT_STR,
        "versions": {"type": "array", "items": obj({"version": INT, "updated_at": OPT_STR, "changed_by": OPT_STR},
                                                   required=[])},
    },
    required=[],
)
CHUNK = obj(
    {
        "chunk_id": INT,
        "document_id": INT,
        "chunk_index": OPT_INT,
        "text": STR,
        "score": OPT_NUM,
        "title": OPT_STR,
        "source_path": OPT_STR,
        "doc_type": OPT_STR,
        "collection": OPT_STR,
        "tags": TAGS,
        "created_at": OPT_STR,
        "updated_at": OPT_STR,
    },
    required=[],
)
# A search hit (engine 3.11): a chunk and the passage of its text that matched, with the matched words as
# [start, end) character offsets into that passage's text (docs/engine-api.md, "Chunk"); null from an older
# engine.
SNIPPET = obj({"text": STR, "start": INT, "highlights": {"type": "array", "items": {"type": "array", "items": INT}}})
SEARCH_HIT = obj({**CHUNK["properties"], "snippet": nullable(SNIPPET)}, required=[])
JOB = obj(
    {
        "id": INT,
        "type": OPT_STR,
        "status": STR,
        "document_id": OPT_INT,
        "filename": OPT_STR,
        "error": OPT_STR,
        "created_at": OPT_STR,
        "started_at": OPT_STR,
        "finished_at": OPT_STR,
        # Where the job files its document (its engine tags, engine 3.7): null when the engine does not say.
        "collection": OPT_STR,
        "tags": TAGS,
    },
    required=[],
)

# --- shaping ----------------------------------------------------------------------------------


def _required_int(raw: Mapping[str, Any], key: str) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise EngineBadResponse(f"the kb engine returned an object without a valid {key!r}")
    return value


def _opt(raw: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = raw.get(key)
    if isinstance(value, bool) and kind is not bool:
        return None
    return value if isinstance(value, kind) else None


def document_tags(raw: Mapping[str, Any]) -> list[str]:
    """An engine document's raw tags, collection tags included."""
    tags = raw.get("tags")
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


def _tags(raw: Mapping[str, Any]) -> tuple[str | None, list[str]]:
    tags = raw.get("tags")
    if not isinstance(tags, list):
        return None, []
    return collection_tags.split(t for t in tags if isinstance(t, str))


def document_collection(raw: Mapping[str, Any]) -> str | None:
    """The collection an engine's document (or one of its versions) is tagged into, if any."""
    return _tags(raw)[0]


def document(raw: Any, *, full: bool = False) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise EngineBadResponse()
    collection, tags = _tags(raw)
    shaped: dict[str, Any] = {
        "id": _required_int(raw, "id"),
        "title": _opt(raw, "title", str),
        "doc_type": _opt(raw, "doc_type", str),
        "source_path": _opt(raw, "source_path", str),
        "collection": collection,
        "tags": tags,
        "chunk_count": _opt(raw, "chunk_count", int),
        "version": _opt(raw, "version", int),
        "created_at": _opt(raw, "created_at", str),
        "updated_at": _opt(raw, "updated_at", str) or _opt(raw, "created_at", str),
    }
    if full:
        shaped["changed_by"] = _opt(raw, "changed_by", str)
        shaped["content"] = _opt(raw, "content", str)
        listed_chunks = raw.get("chunks")
        chunks: list[Any] = listed_chunks if isinstance(listed_chunks, list) else []
        shaped["chunks"] = [
            {"id": _required_int(c, "id"), "index": _opt(c, "index", int) or 0, "text": _opt(c, "text", str) or ""}
            for c in chunks
            if isinstance(c, Mapping)
        ]
    return shaped


def versions(raw: Any) -> list[dict[str, Any]]:
    """The versions of an engine's GET /documents/{id}/versions answer: number, time, author."""
    if not isinstance(raw, Mapping):
        raise EngineBadResponse()
    return [{"version": _required_int(v, "version"), "updated_at": _opt(v, "updated_at", str),
             "changed_by": _opt(v, "changed_by", str)} for v in listed(raw, "versions") if isinstance(v, Mapping)]


def chunk(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise EngineBadResponse()
    collection, tags = _tags(raw)
    return {
        "chunk_id": _required_int(raw, "chunk_id"),
        "document_id": _required_int(raw, "document_id"),
        "chunk_index": _opt(raw, "chunk_index", int),
        "text": _opt(raw, "text", str) or "",
        "score": _opt(raw, "score", (int, float)),
        "title": _opt(raw, "title", str),
        "source_path": _opt(raw, "source_path", str),
        "doc_type": _opt(raw, "doc_type", str),
        "collection": collection,
        "tags": tags,
        "created_at": _opt(raw, "created_at", str),
        "updated_at": _opt(raw, "updated_at", str) or _opt(raw, "created_at", str),
    }


def search_hit(raw: Any) -> dict[str, Any]:
    """A chunk with its `snippet`: null when the engine sent none or one that does not fit its text."""
    return {**chunk(raw), "snippet": _snippet(raw.get("snippet"))}


def _snippet(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, Mapping):
        return None
    text, start, pairs = raw.get("text"), raw.get("start"), raw.get("highlights")
    if not isinstance(text, str) or not _is_int(start) or not isinstance(pairs, list):
        return None
    highlights = []
    for pair in pairs:
        if not (isinstance(pair, list) and len(pair) == 2 and all(_is_int(n) for n in pair)
                and 0 <= pair[0] < pair[1] <= len(text)):
            return None
        highlights.append([pair[0], pair[1]])
    return {"text": text, "start": start, "highlights": highlights}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def job(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise EngineBadResponse()
    collection, tags = _tags(raw)
    return {
        "id": _required_int(raw, "id"),
        "type": _opt(raw, "type", str),
        "status": _opt(raw, "status", str) or "unknown",
        "document_id": _opt(raw, "document_id", int),
        "filename": _opt(raw, "filename", str),
        "error": _opt(raw, "error", str),
        "created_at": _opt(raw, "created_at", str),
        "started_at": _opt(raw, "started_at", str),
        "finished_at": _opt(raw, "finished_at", str),
        "collection": collection,
        "tags": tags,
    }


def listed(raw: Mapping[str, Any], key: str) -> list[Any]:
    """The list under `key` in an engine response, or a clear error when it is not one."""
    value = raw.get(key)
    if not isinstance(value, list):
        raise EngineBadResponse()
    return value
