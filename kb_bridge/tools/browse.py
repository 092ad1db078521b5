"""kb_collections and kb_list: what is in the knowledge base, by collection and by metadata."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kb_bridge import collection_tags, shapes
from kb_bridge.errors import EngineUnsupported, InvalidArgument, NotFound
from kb_bridge.tools import arguments as a
from kb_bridge.tools import cursors, reach, render, time_range
from kb_bridge.tools.arguments import ArgumentParser
from kb_bridge.tools.spec import Result, ToolContext, ToolSpec

# doc_type counts in a collection's details; anything else is counted as "other".
KNOWN_DOC_TYPES = ("note", "md", "txt", "pdf", "html", "docx")

COLLECTION_INFO = shapes.obj(
    {
        "name": shapes.STR,
        "documents": shapes.INT,
        "by_doc_type": shapes.nullable({"type": "object", "additionalProperties": shapes.INT}),
        "latest_update": shapes.OPT_STR,
    },
    required=[],
)


@dataclass(frozen=True, kw_only=True)
class CollectionsArguments:
    name: str | None = a.field(a.COLLECTION, default=None)


COLLECTIONS_OUTPUT = shapes.result({"collections": {"type": "array", "items": COLLECTION_INFO}})



CURSOR_CHARS = 20_000  # a merged offset cursor of 170 collections of the longest names


@dataclass(frozen=True, kw_only=True)
class ListArguments:
    collection: str | None = a.field(a.COLLECTION, default=None)
    tags: tuple[str, ...] = a.field(a.TAGS, default=())
    doc_type: str | None = a.field(a.DOC_TYPE, default=None)
    source_path: str | None = a.field(a.SOURCE_PATH, default=None)
    updated_since: str | None = a.field({"type": "string", "maxLength": 40}, default=None, description="ISO date or date-time")
    since: str | None = a.field(a.TIME, default=None, description=a.SINCE_HELP)
    until: str | None = a.field(a.TIME, default=None, description=a.UNTIL_HELP)
    time_field: str = a.field(a.TIME_FIELD, default="created")
    limit: int = a.field(a.PAGE_LIMIT, default=20)
    # As long as the cursors kb_list returns: a key cursor is about 100 characters, but against an engine before 3.14
    # a token limited to several collections gets one offset per collection (about 116 characters each at the
    # longest names), and 200 refused the bridge's own cursor from 8 collections of 10-character names on.
    cursor: str | None = a.field({"type": "string", "maxLength": CURSOR_CHARS}, default=None)


LIST_OUTPUT = shapes.result(
    {"documents": {"type": "array", "items": shapes.DOCUMENT}, "total": shapes.INT, "next_cursor": shapes.OPT_STR}
)


def _total(raw: dict[str, Any]) -> int:
    total = raw.get("total")
    return total if isinstance(total, int) else len(shapes.listed(raw, "documents"))


def list_collections(ctx: ToolContext, args: CollectionsArguments) -> Result:
    name = args.name
    if name is None:
        raw = ctx.engine.list_tags(prefix=collection_tags.PREFIX)
        found = []
        for tag in shapes.listed(raw, "tags"):
            if isinstance(tag, dict) and isinstance(tag.get("name"), str) and collection_tags.is_collection_tag(tag["name"]):
                name = tag["name"][len(collection_tags.PREFIX) :]
                if not ctx.principal.sees(name):
                    continue
                count = tag.get("documents")
                found.append({
                    "name": name,
                    "documents": count if isinstance(count, int) else 0,
                    "by_doc_type": None,
                    "latest_update": None,
                })
        return {"collections": sorted(found, key=lambda c: c["name"])}
    return {"collections": [collection_details(ctx, name)]}


# Collections the console's tags page counts per request: each is one engine request (GET /tags?within=), so a
# knowledge base of thousands of collections is counted a page at a time, not in one request of thousands.
TAGS_PAGE_COLLECTIONS = 50


def tags_by_collection(ctx: ToolContext, after: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """[{collection, tags: [{name, documents}]}] for at most TAGS_PAGE_COLLECTIONS of the collections the
    principal sees, by name, those after `after` (the last one of the page before), the collection tags left out
    (they are the collections): the console's tags page; and the last name counted when more follow, else None.
    Needs an engine that counts tags within a tag (3.12, `within`): an older one counts every document, which
    could show a limited token counts from collections it may not see, so it is ENGINE_UNSUPPORTED."""
    collections = [c for c in list_collections(ctx, CollectionsArguments())["collections"]  # sorted by name
                   if after is None or c["name"] > after]
    page = collections[:TAGS_PAGE_COLLECTIONS]
    found = []
    for collection in page:
        # The engine's own tag, as it listed it: a name the bridge would not take (over 64 characters, written to
        # the engine directly) is still counted, where tag_for's check failed the whole page for everyone.
        tag = collection_tags.PREFIX + collection["name"]
        raw = ctx.engine.list_tags(within=tag)
        if raw.get("within") != tag:
            raise EngineUnsupported("counting tags per collection needs engine 3.12 (GET /tags?within=)")
        own = [{"name": t["name"], "documents": t["documents"] if isinstance(t.get("documents"), int) else 0}
               for t in shapes.listed(raw, "tags")
               if isinstance(t, dict) and isinstance(t.get("name"), str) and not collection_tags.is_collection_tag(t["name"])]
        found.append({"collection": collection["name"], "documents": collection["documents"], "tags": own})
    return found, (str(page[-1]["name"]) if len(collections) > len(page) else None)


def collection_details(ctx: ToolContext, name: str) -> dict[str, Any]:
    tag = collection_tags.tag_for(name)
    if not ctx.principal.sees(name):
        raise NotFound(f"collection {name!r} has no documents")  # as for an empty one: nothing leaks
    newest = ctx.engine.list_documents([("tag", tag), ("limit", 1)])
    total = _total(newest)
    if total == 0:
        raise NotFound(f"collection {name!r} has no documents")
    docs = shapes.listed(newest, "documents")
    by_type: dict[str, int] = {}
    for doc_type in KNOWN_DOC_TYPES:
        count = _total(ctx.engine.list_documents([("tag", tag), ("doc_type", doc_type), ("limit", 1)]))
        if count:
            by_type[doc_type] = count
    if total - sum(by_type.values()) > 0:
        by_type["other"] = total - sum(by_type.values())
    latest = shapes.document(docs[0])["updated_at"] if docs else None
    return {"name": name, "documents": total, "by_doc_type": by_type, "latest_update": latest}


def _check_timestamp(value: str) -> str:
    """updated_since: a date or date-time (no span), read as `since` is and sent in the engine's own form, so one
    whose offset takes it past the year 9999 or before 0001 in UTC is a bound, not the engine's refusal without
    the field's name."""
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}([T ][0-9:.]+(Z|[+-]\d{2}:?\d{2})?)?", value, re.ASCII):
        raise InvalidArgument("updated_since", "must be an ISO-8601 date or date-time, e.g. 2026-04-01T00:00:00Z")
    return time_range.iso(time_range.moment(value, "updated_since", datetime.now(timezone.utc)))


def list_documents(ctx: ToolContext, args: ListArguments) -> Result:
    cursor = cursors.decode(args.cursor, "cursor") if args.cursor is not None else None
    if cursor is not None:
        args = _with_cursor_filters(args, cursor.filters)
    params: list[tuple[str, Any]] = []
    for key in ("doc_type", "source_path"):
        value = getattr(args, key)
        if value is not None:
            params.append((key, value))
    if args.updated_since is not None:
        params.append(("updated_since", _check_timestamp(args.updated_since)))
    params.extend(time_range.engine_bounds(args.since, args.until, args.time_field).items())
    raw, total, following = reach.page_of_documents(
        ctx.engine, ctx.principal, params, args.collection, args.tags, args.limit, cursor, filters=_filters(args)
    )
    return {"documents": [shapes.document(d) for d in raw], "total": total, "next_cursor": following}


def _filters(args: ListArguments) -> dict[str, Any]:
    """The filters of a kb_list call as the agent gave them, which its next_cursor carries (tools/cursors.py):
    none for no filter, so a walk without one shares its cursors with resources/list's. Tags are a set (all must
    match), `time_field` counts only with a time bound, and `limit` is no filter: a walk may change its page size."""
    given: dict[str, Any] = {key: getattr(args, key) for key in
                             ("collection", "doc_type", "source_path", "updated_since", "since", "until")}
    given["tags"] = sorted(set(args.tags)) or None
    given["time_field"] = args.time_field if args.since is not None or args.until is not None else None
    return {key: value for key, value in given.items() if value is not None}


def _with_cursor_filters(args: ListArguments, carried: dict[str, Any]) -> ListArguments:
    """The call's arguments with the filters its cursor carries: a call may send the cursor alone, or with the
    filters of the call that returned it (some or all); a filter the cursor's listing did not have, or has
    otherwise, is VALIDATION_ERROR naming `cursor`, where it went on in another listing and the page silently
    left documents out. What a cursor carries is checked as the tool's own arguments are."""
    given = _filters(args)
    differ = sorted(key for key in given if carried.get(key) != given[key])
    if differ:
        raise InvalidArgument("cursor", f"was returned for a listing with other filters ({', '.join(differ)}): send it "
                                        "alone, or with the filters of the call that returned it")
    try:
        return _list_arguments().parse({**carried, "limit": args.limit, "cursor": args.cursor})
    except InvalidArgument:
        raise InvalidArgument("cursor", "is not a cursor this server returned") from None


@functools.cache
def _list_arguments() -> ArgumentParser[ListArguments]:
    return ArgumentParser(ListArguments)


def render_collections(result: Result) -> str:
    if not result["collections"]:
        return "No collections yet."
    lines = []
    for c in result["collections"]:
        line = f"- {c['name']}: {c['documents']} document(s)"
        if c["by_doc_type"] is not None:
            kinds = ", ".join(f"{k} {v}" for k, v in c["by_doc_type"].items())
            line += f" ({kinds}); latest update {c['latest_update'] or '?'}"
        lines.append(line)
    return "\n".join(lines)


def render_list(result: Result) -> str:
    text = render.documents(result["documents"], empty="No documents match.")
    more = f"\nMore: pass cursor={result['next_cursor']}" if result["next_cursor"] else ""
    return f"{len(result['documents'])} of {result['total']} document(s), newest update first:\n{text}{more}"


TOOLS = [
    ToolSpec(
        name="kb_collections",
        description="The collections with their document counts; name: one collection's details (counts by "
        "doc_type, latest update).",
        arguments=CollectionsArguments,
        output_schema=COLLECTIONS_OUTPUT,
        handler=list_collections,
        render=render_collections,
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        name="kb_list",
        description="Browse documents by metadata, newest update first, a page at a time (cursor: the last "
        "page's next_cursor). kb_search finds by content.",
        arguments=ListArguments,
        output_schema=LIST_OUTPUT,
        handler=list_documents,
        render=render_list,
        read_only=True,
        idempotent=True,
    ),
]
