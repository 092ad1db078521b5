"""The browsing and maintenance tools: collections, list, delete, related, read-your-writes,
no silent overwrites — through the real MCP server in process, engine faked."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import responses
from mcp import Client

from kb_bridge.auth.principal import Principal
from kb_bridge.protocol.server import build_server
from kb_bridge.runtime import Bridge
from kb_bridge.errors import NotFound
from kb_bridge.tools import browse, cursors, reach, related, search
from kb_bridge.tools.spec import ToolContext
from kb_bridge.testing.fake_engine import API, make_settings
from kb_bridge.testing.fake_engine import body, calls_to, chunk, document, job

pytestmark = pytest.mark.anyio


def query(call: responses.Call) -> dict[str, list[str]]:
    return parse_qs(urlsplit(call.request.url).query)


# --- kb_collections ------------------------------------------------------------------------------


async def test_collections_lists_every_collection_with_counts(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/tags", json={"tags": [{"name": "collection:memory", "documents": 4}, {"name": "collection:documents", "documents": 9}]})
    result = await client.call_tool("kb_collections", {})
    assert query(engine.calls[0])["prefix"] == ["collection:"]
    assert [(c["name"], c["documents"]) for c in result.structured_content["collections"]] == [("documents", 9), ("memory", 4)]


async def test_collection_details_count_by_doc_type_and_latest_update(client: Client, engine: responses.RequestsMock) -> None:
    def documents(request: responses.PreparedRequest) -> tuple[int, dict[str, str], str]:
        import json

        params = parse_qs(urlsplit(request.url).query)
        totals = {"note": 3, "pdf": 2}
        doc_type = params.get("doc_type", [None])[0]
        total = totals.get(doc_type, 0) if doc_type else 6
        docs = [document(1, updated_at="2026-11-20T10:00:00Z")] if total else []
        return 200, {}, json.dumps({"documents": docs, "total": total})

    engine.add_callback(responses.GET, f"{API}/documents", callback=documents)
    result = await client.call_tool("kb_collections", {"name": "memory"})
    info = result.structured_content["collections"][0]
    assert info == {"name": "memory", "documents": 6, "by_doc_type": {"note": 3, "pdf": 2, "other": 1}, "latest_update": "2026-11-20T10:00:00Z"}
    assert all(query(c)["tag"] == ["collection:memory"] for c in engine.calls)


# --- kb_list -----------------------------------------------------------------------------------------


async def test_list_filters_and_paginates_with_a_cursor(client: Client, engine: responses.RequestsMock) -> None:
    # An engine before 3.14 (no `after` in its answers): the cursor holds an offset.
    engine.get(f"{API}/documents", json={"documents": [document(i) for i in (9, 8, 7)], "total": 3})
    engine.get(f"{API}/documents", json={"documents": [document(7)], "total": 3})
    first = await client.call_tool("kb_list", {"collection": "memory", "tags": ["a"], "doc_type": "note", "updated_since": "2026-01-01", "limit": 2})
    params = query(engine.calls[0])
    assert params["tag"] == ["collection:memory", "a"] and params["doc_type"] == ["note"]
    # One more than a page: whether it comes says whether another page follows.
    assert params["updated_since"] == ["2026-01-01T00:00:00.000Z"] and params["limit"] == ["3"] and params["offset"] == ["0"]
    assert [d["id"] for d in first.structured_content["documents"]] == [9, 8]
    cursor = first.structured_content["next_cursor"]
    assert cursor and first.structured_content["total"] == 3
    second = await client.call_tool("kb_list", {"collection": "memory", "limit": 2, "cursor": cursor})
    assert query(engine.calls[1])["offset"] == ["2"] and "after" not in query(engine.calls[1])
    assert second.structured_content["next_cursor"] is None


@pytest.mark.parametrize(("given", "sent"), [
    ("2026-04-01T09:30:00+02:00", "2026-04-01T07:30:00.000Z"),
    ("2026-04-01T09:30:57.2485Z", "2026-04-01T09:30:57.249Z"),  # rounded up to the stored milliseconds, as since
    # Past the years 0001-9999 in UTC: the engine refused it without naming the field (its 422, "field": "").
    ("0001-01-01T00:00:00+14:00", "0001-01-01T00:00:00.000Z"),
    ("9999-12-31T23:59:59-14:00", "9999-12-31T23:59:59.999Z"),
])
async def test_updated_since_is_read_as_since_is(client: Client, engine: responses.RequestsMock, given: str,
                                                 sent: str) -> None:
    engine.get(f"{API}/documents", json={"documents": [], "total": 0})
    result = await client.call_tool("kb_list", {"updated_since": given})
    assert not result.is_error, result.content
    assert query(engine.calls[0])["updated_since"] == [sent]


def _cursor(data: dict[str, Any], filters: dict[str, Any] | None = None) -> str:
    """A cursor holding `data`, sealed as the bridge seals its own (for a kb_list of these filters), so that what
    a test refuses is the position or the filters it holds, not the seal."""
    kind, value = next(iter(data.items()))
    extra: dict[str, Any] = {"f": filters} if filters else {}
    sealed = {**data, **extra, "s": cursors.seal(kind, value, filters or {})}
    return base64.urlsafe_b64encode(json.dumps(sealed).encode()).decode().rstrip("=")


@pytest.mark.parametrize(("arguments", "field"), [
    ({"cursor": "garbage!"}, "cursor"), ({"updated_since": "yesterday"}, "updated_since"),
    ({"updated_since": "2026-13-45"}, "updated_since"), ({"updated_since": "7d"}, "updated_since"),
    # Cursors that look like ours but are not: forged keys, an offset of the wrong kind, two positions at once.
    ({"cursor": _cursor({"k": ["2026-04-05T08:00:00.000Z", 0]})}, "cursor"),
    ({"cursor": _cursor({"k": ["2026-04-05T08:00:00+02:00", 5]})}, "cursor"),
    ({"cursor": _cursor({"k": ["2026-02-30T08:00:00.000Z", 5]})}, "cursor"),
    ({"cursor": _cursor({"k": ["2026-04-05T08:00:00.000Z,1", 5]})}, "cursor"),
    ({"cursor": _cursor({"k": ["2026-04-05T08:00:00.000Z", True]})}, "cursor"),
    ({"cursor": _cursor({"k": ["2026-04-05T08:00:00.000Z", 2**63]})}, "cursor"),
    ({"cursor": _cursor({"k": ["2026-04-05T08:00:00.000Z"]})}, "cursor"),
    ({"cursor": _cursor({"k": ["2026-04-05T08:00:00.000Z", 5], "o": 1})}, "cursor"),
    ({"cursor": _cursor({"o": -1})}, "cursor"), ({"cursor": _cursor({"o": 2.5})}, "cursor"),
    ({"cursor": _cursor({"m": {"memory": 1}})}, "cursor"),  # a merged listing's, for a token without one
    # Sealed, but carrying a filter no call could give: checked as the tool's own arguments are.
    ({"cursor": _cursor({"o": 2}, {"collection": "../memory"})}, "cursor"),
    ({"cursor": _cursor({"o": 2}, {"tags": ["a\nb"]})}, "cursor"),
    ({"cursor": "eyJvIjoyfQ"}, "cursor"),  # {"o":2}, as the bridge wrote cursors before they were sealed
])
async def test_list_rejects_bad_cursor_and_dates(client: Client, engine: responses.RequestsMock, arguments: dict, field: str) -> None:
    result = await client.call_tool("kb_list", arguments)
    assert result.is_error and result.structured_content["error"]["field"] == field
    assert result.structured_content["error"]["code"] == "VALIDATION_ERROR"
    assert not engine.calls


async def test_a_cursor_carries_its_filters_and_refuses_others_or_an_edit_naming_cursor(
        client: Client, engine: responses.RequestsMock) -> None:
    """A cursor sent with other filters, or with a character changed, went on from another place or in another
    listing, and the page silently left documents out (105 of 3,024 one-character edits of a key cursor decoded
    to another key). It now carries its listing's filters: sent alone it goes on in that listing, with some or all
    of them too; with others, or edited, it is VALIDATION_ERROR naming `cursor`, before any engine call."""
    listing = _six(engine)
    for doc in listing.docs.values():
        doc["tags"] += ["a", "b"]
    listing.add(20)  # in the collection, older than all, without the tags: in no page of this listing
    listing.docs[20]["updated_at"] = "2026-04-05T07:00:00.000Z"
    first = await client.call_tool("kb_list", {"collection": "memory", "tags": ["a", "b"], "limit": 2})
    cursor = first.structured_content["next_cursor"]
    assert [d["id"] for d in first.structured_content["documents"]] == [13, 12] and cursor
    calls = len(engine.calls)
    refused = [
        {"collection": "notes", "cursor": cursor},  # another collection
        {"collection": "memory", "tags": ["a"], "cursor": cursor},  # a tag fewer
        {"tags": ["a", "b"], "since": "7d", "cursor": cursor},  # a time bound more
    ]
    decoded = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    for i in range(len(cursor)):
        for ch in "AQgw0-_":
            edited = cursor[:i] + ch + cursor[i + 1:]
            try:
                same = base64.urlsafe_b64decode(edited + "=" * (-len(edited) % 4)) == decoded
            except ValueError:
                same = False
            if not same:  # the last character's spare bits decode to the same cursor
                refused.append({"cursor": edited})
    for arguments in refused:
        result = await client.call_tool("kb_list", arguments)
        assert result.is_error, arguments
        assert result.structured_content["error"]["code"] == "VALIDATION_ERROR", arguments
        assert result.structured_content["error"]["field"] == "cursor", arguments
    assert len(engine.calls) == calls
    # Alone, or with its filters (some, in another order, another page size), it goes on in its own listing.
    alone = await client.call_tool("kb_list", {"cursor": cursor})
    assert [d["id"] for d in alone.structured_content["documents"]] == [11, 10, 9, 8]
    assert set(query_of(engine.calls[-1].request.url)["tag"]) == {"collection:memory", "a", "b"}
    again = await client.call_tool("kb_list", {"tags": ["b", "a", "a"], "limit": 3, "cursor": cursor})
    assert [d["id"] for d in again.structured_content["documents"]] == [11, 10, 9]
    following = await client.call_tool("kb_list", {"cursor": again.structured_content["next_cursor"]})
    assert [d["id"] for d in following.structured_content["documents"]] == [8]


class Listing:
    """A fake engine's documents behind GET /documents, answered as the local engine does: newest update first
    (ties: the higher id), tags all must match, `updated_since`, `limit`, `offset`, `total`, and `after` (3.14) unless `keyset`
    is off (an older engine). Documents come and go between pages with add, update and delete."""

    def __init__(self, mock: responses.RequestsMock, keyset: bool = True) -> None:
        self.docs: dict[int, dict[str, Any]] = {}
        self.keyset = keyset
        self._minute = 0
        mock.add_callback(responses.GET, f"{API}/documents", callback=self._answer)

    def add(self, ident: int, collection: str = "memory") -> None:
        self.docs[ident] = document(ident, tags=[f"collection:{collection}"])
        self.update(ident)

    def update(self, ident: int) -> None:
        self._minute += 1
        self.docs[ident]["updated_at"] = f"2026-04-05T08:{self._minute:02d}:00.000Z"

    def delete(self, ident: int) -> None:
        del self.docs[ident]

    def _answer(self, request: responses.PreparedRequest) -> tuple[int, dict[str, str], str]:
        asked = query_of(request.url)
        since = asked.get("updated_since", [""])[0]
        found = sorted((d for d in self.docs.values()
                        if set(asked.get("tag", [])) <= set(d["tags"]) and d["updated_at"] >= since),
                       key=lambda d: (d["updated_at"], d["id"]), reverse=True)
        total = len(found)
        after = asked.get("after", [None])[0] if self.keyset else None
        if after is not None:
            stamp, _, ident = after.rpartition(",")
            found = [d for d in found if (d["updated_at"], d["id"]) < (stamp, int(ident))]
        offset, limit = int(asked.get("offset", ["0"])[0]), int(asked["limit"][0])
        answer: dict[str, Any] = {"documents": found[offset:offset + limit], "total": total}
        if self.keyset:
            answer["after"] = after
        return 200, {}, json.dumps(answer)


def query_of(url: str | None) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url or "").query)


async def _walk(client: Client, changes: dict[int, Callable[[], None]], limit: int = 2) -> list[int]:
    """Every document id kb_list returns, page by page; changes[n] runs after page n (from 1)."""
    seen: list[int] = []
    cursor, page = None, 0
    while True:
        listed = await client.call_tool("kb_list", {"limit": limit, **({"cursor": cursor} if cursor else {})})
        assert not listed.is_error, listed.structured_content
        seen += [d["id"] for d in listed.structured_content["documents"]]
        page += 1
        changes.get(page, lambda: None)()
        cursor = listed.structured_content["next_cursor"]
        if cursor is None:
            return seen


def _six(engine: responses.RequestsMock) -> Listing:
    """Notes 8 to 13, 13 updated last: the listing is 13, 12, 11, 10, 9, 8."""
    listing = Listing(engine)
    for ident in range(8, 14):
        listing.add(ident)
    return listing


async def test_list_paging_never_skips_a_document_when_one_already_seen_is_deleted(
        client: Client, engine: responses.RequestsMock) -> None:
    listing = _six(engine)
    # An offset cursor skipped 11: it moved into the place 12 had left.
    assert await _walk(client, {1: lambda: listing.delete(12)}) == [13, 12, 11, 10, 9, 8]


async def test_list_paging_never_repeats_a_document_when_one_is_added(client: Client, engine: responses.RequestsMock) -> None:
    listing = _six(engine)
    # An offset cursor returned 12 twice: the new note pushed it onto the second page.
    assert await _walk(client, {1: lambda: listing.add(14)}) == [13, 12, 11, 10, 9, 8]


async def test_list_paging_never_repeats_an_updated_document_and_the_walk_misses_only_one_updated_ahead(
        client: Client, engine: responses.RequestsMock) -> None:
    listing = _six(engine)
    began = listing.docs[13]["updated_at"]  # the time the walk began, as far as this listing can tell
    # 12 (seen) and 10 (not yet) are updated after the first page, which moves both to the front: by offset
    # the walk was 13, 12, 13, 11, 9, 8. By key, both are ahead of the cursor: 12 is not repeated, and 10 is
    # not reached in this walk...
    seen = await _walk(client, {1: lambda: (listing.update(12), listing.update(10))})
    assert seen == [13, 12, 11, 9, 8]
    # ...and the agent catches up on what changed since the walk began with updated_since.
    caught_up = await client.call_tool("kb_list", {"updated_since": began})
    assert [d["id"] for d in caught_up.structured_content["documents"]] == [10, 12, 13]


async def test_list_paging_by_key_sends_the_last_documents_key_and_no_offset(client: Client, engine: responses.RequestsMock) -> None:
    listing = _six(engine)
    first = await client.call_tool("kb_list", {"limit": 2})
    await client.call_tool("kb_list", {"limit": 2, "cursor": first.structured_content["next_cursor"]})
    asked = query_of(engine.calls[1].request.url)
    assert asked["after"] == [f"{listing.docs[12]['updated_at']},12"] and "offset" not in asked and asked["limit"] == ["3"]
    # An exact last page says so: no cursor to an empty page.
    last = await client.call_tool("kb_list", {"limit": 6})
    assert len(last.structured_content["documents"]) == 6 and last.structured_content["next_cursor"] is None


async def test_an_offset_cursor_from_before_an_engine_upgrade_goes_on_by_key(client: Client, engine: responses.RequestsMock) -> None:
    listing = _six(engine)
    listing.keyset = False
    first = await client.call_tool("kb_list", {"limit": 2})
    listing.keyset = True
    second = await client.call_tool("kb_list", {"limit": 2, "cursor": first.structured_content["next_cursor"]})
    assert query_of(engine.calls[1].request.url)["offset"] == ["2"]
    third = await client.call_tool("kb_list", {"limit": 2, "cursor": second.structured_content["next_cursor"]})
    assert query_of(engine.calls[2].request.url)["after"] == [f"{listing.docs[10]['updated_at']},10"]
    assert [d["id"] for d in third.structured_content["documents"]] == [9, 8]


async def test_a_key_cursor_answered_by_an_engine_that_ignores_after_is_engine_unsupported(
        client: Client, engine: responses.RequestsMock) -> None:
    """An older replica behind a balancer lists from the start: that page must not pass for the next one."""
    listing = _six(engine)
    first = await client.call_tool("kb_list", {"limit": 2})
    listing.keyset = False
    engine.get(f"{API}/status", json={"version": "3.13.0"})
    result = await client.call_tool("kb_list", {"limit": 2, "cursor": first.structured_content["next_cursor"]})
    error = result.structured_content["error"]
    assert result.is_error and error["code"] == "ENGINE_UNSUPPORTED" and "3.14" in error["message"]


async def test_an_earlier_version_from_an_engine_without_versions_is_engine_unsupported(
        client: Client, engine: responses.RequestsMock) -> None:
    """An engine before 3.9 ignores `?version=` and answers the document as it is now: that answer must never
    pass for the earlier version the agent asked for (the bridge in front of an engine not yet upgraded)."""
    engine.get(f"{API}/documents/42", json=document(42, version=2, content="the text as it is now"))
    engine.get(f"{API}/documents/42/versions", status=404, json={"error": {"code": "not_found", "message": "nope"}})
    engine.get(f"{API}/status", json={"version": "3.2.0"})
    result = await client.call_tool("kb_get", {"document_id": 42, "version": 1})
    error = result.structured_content["error"]
    assert result.is_error and error["code"] == "ENGINE_UNSUPPORTED" and "3.9" in error["message"]
    assert "the text as it is now" not in json.dumps(result.structured_content)


async def test_a_key_walk_meeting_a_document_without_a_usable_key_says_the_engine_answered_badly(
        client: Client, engine: responses.RequestsMock) -> None:
    """No offset is known on a walk by key, so it cannot fall back to one: a clear error, never a wrong page."""
    listing = _six(engine)
    first = await client.call_tool("kb_list", {"limit": 2})
    listing.docs[10]["updated_at"] = "2026-04-05T08:04:00.000Z".replace("Z", "+00:00")  # not the API's form
    result = await client.call_tool("kb_list", {"limit": 2, "cursor": first.structured_content["next_cursor"]})
    assert result.is_error and result.structured_content["error"]["code"] == "ENGINE_ERROR"
    assert "updated_at" in result.structured_content["error"]["message"]


MEM_AND_NOTES = Principal("pair", collections=frozenset({"mem", "notes"}), kind="token")


def _merged_walk(bridge: Bridge, changes: dict[int, Callable[[], None]]) -> list[int]:
    """kb_list's walk as a token limited to two collections sees it (one engine listing per collection)."""
    ctx = ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=MEM_AND_NOTES)
    seen: list[int] = []
    cursor, page = None, 0
    while True:
        result = browse.list_documents(ctx, browse.ListArguments(limit=2, cursor=cursor))
        seen += [d["id"] for d in result["documents"]]
        page += 1
        changes.get(page, lambda: None)()
        cursor = result["next_cursor"]
        if cursor is None:
            return seen


@pytest.mark.parametrize("keyset", [True, False])
def test_merged_paging_over_two_collections_never_skips_or_repeats_while_notes_change(
        bridge: Bridge, engine: responses.RequestsMock, keyset: bool) -> None:
    listing = Listing(engine, keyset=keyset)
    for ident in range(8, 14):  # 13, 11, 9 in mem; 12, 10, 8 in notes
        listing.add(ident, "mem" if ident % 2 else "notes")
    listing.add(99, "secret")
    undisturbed = _merged_walk(bridge, {})
    assert undisturbed == [13, 12, 11, 10, 9, 8]
    if not keyset:
        return  # an engine before 3.14 keeps the offsets of old, as the walk above shows they still serve
    # After the first page [13, 12]: 12 (seen, notes) deleted, 14 added to mem, 13 (seen, mem) updated. By
    # offsets per collection the walk was 13, 12, 14, 11, 9, 8 (10 skipped); by the one key it goes on from 12.
    changed = _merged_walk(bridge, {1: lambda: (listing.delete(12), listing.add(14, "mem"), listing.update(13))})
    assert changed == [13, 12, 11, 10, 9, 8]
    tags = [query_of(call.request.url)["tag"] for call in engine.calls]
    assert ["collection:secret"] not in tags and all(len(t) == 1 for t in tags)


@pytest.mark.parametrize("keyset", [True, False])
def test_a_document_in_both_of_a_tokens_collections_is_listed_once(
        bridge: Bridge, engine: responses.RequestsMock, keyset: bool) -> None:
    """Each collection's listing holds a document tagged into both: the merged walk showed it twice."""
    listing = Listing(engine, keyset=keyset)
    for ident in range(8, 14):
        listing.add(ident, "mem" if ident % 2 else "notes")
    # Pages of two: 13, 12 | 11, 10 | 9, 8. 12 ends a page, so its second copy comes once the page is full; 9
    # opens one.
    listing.docs[12]["tags"] = ["collection:mem", "collection:notes"]
    listing.docs[9]["tags"] = ["collection:mem", "collection:notes"]
    assert _merged_walk(bridge, {}) == [13, 12, 11, 10, 9, 8]


@pytest.mark.parametrize("keyset", [True, False])
def test_a_limited_tokens_listing_leaves_out_a_document_kb_get_refuses(
        bridge: Bridge, engine: responses.RequestsMock, keyset: bool) -> None:
    """A document tagged into the token's collection and into another that its first collection tag names is
    one kb_get refuses (NOT_FOUND): kb_list listed it all the same. The walk goes on past it."""
    mem = Principal("mem", collections=frozenset({"mem"}), kind="token")
    ctx = ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=mem)
    listing = Listing(engine, keyset=keyset)
    for ident in range(8, 14):
        listing.add(ident, "mem")
    listing.docs[12]["tags"] = listing.docs[11]["tags"] = ["collection:alpha", "collection:mem"]
    engine.get(f"{API}/documents/12", json=listing.docs[12])
    with pytest.raises(NotFound):
        reach.visible_document(bridge.engine, mem, 12)
    seen: list[int] = []
    cursor = None
    while True:
        result = browse.list_documents(ctx, browse.ListArguments(limit=2, cursor=cursor))
        seen += [d["id"] for d in result["documents"]]
        cursor = result["next_cursor"]
        if cursor is None:
            break
    assert seen == [13, 10, 9, 8]


def test_a_limited_tokens_search_leaves_out_a_hit_the_engine_answers_from_another_collection(
        bridge: Bridge, engine: responses.RequestsMock) -> None:
    """The engine filters by the token's collection tag, but a document moved out while the search ran (an
    engine that read its hits after ranking answered it with its new tags), or one also tagged into another
    collection that sorts first (kb_get refuses it), was shown: kb_search holds hits to kb_get's reach."""
    mem = Principal("mem", collections=frozenset({"mem"}), kind="token")
    ctx = ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=mem)
    engine.post(f"{API}/search", json={"query": "q", "mode": "hybrid", "results": [
        chunk(1, 1, score=0.9, tags=["collection:secret"]),
        chunk(2, 2, score=0.8, tags=["collection:alpha", "collection:mem"]),
        chunk(3, 3, score=0.5, tags=["collection:mem"]),
    ]})
    result = search.search(ctx, search.SearchArguments(query="q"))
    assert [hit["document_id"] for hit in result["results"]] == [3]
    assert body(engine.calls[0])["tags"] == ["collection:mem"]


def test_a_search_over_two_collections_returns_a_chunk_found_in_both_once(
        bridge: Bridge, engine: responses.RequestsMock) -> None:
    """A document tagged into both of a token's collections is found by the search of each: it came back twice."""
    ctx = ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=MEM_AND_NOTES)
    both = chunk(1, 1, score=0.9, tags=["collection:mem", "collection:notes"])
    engine.post(f"{API}/search", json={"query": "q", "mode": "hybrid", "results": [both]})
    engine.post(f"{API}/search", json={"query": "q", "mode": "hybrid", "results": [
        both, chunk(2, 2, score=0.5, tags=["collection:notes"])]})
    result = search.search(ctx, search.SearchArguments(query="q"))
    assert [hit["chunk_id"] for hit in result["results"]] == [1, 2]
    assert [body(call)["tags"] for call in engine.calls] == [["collection:mem"], ["collection:notes"]]


def test_a_search_over_two_collections_orders_equal_scores_by_chunk_id_as_the_engine_does(
        bridge: Bridge, engine: responses.RequestsMock) -> None:
    """The merge kept equal scores in the order of the collections' names: mem's chunk 5 before notes' 3."""
    ctx = ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=MEM_AND_NOTES)
    engine.post(f"{API}/search", json={"query": "q", "mode": "hybrid", "results": [
        chunk(5, 5, score=0.5, tags=["collection:mem"]), chunk(6, 6, score=0.4, tags=["collection:mem"])]})
    engine.post(f"{API}/search", json={"query": "q", "mode": "hybrid", "results": [
        chunk(3, 3, score=0.5, tags=["collection:notes"]), chunk(9, 9, score=0.5, tags=["collection:notes"])]})
    result = search.search(ctx, search.SearchArguments(query="q"))
    assert [hit["chunk_id"] for hit in result["results"]] == [3, 5, 9, 6]


# --- kb_delete -----------------------------------------------------------------------------------------


async def test_delete_is_destructive_and_idempotent(client: Client, engine: responses.RequestsMock) -> None:
    engine.delete(f"{API}/documents/5", status=204)
    engine.delete(f"{API}/documents/5", status=404, json={"error": {"code": "not_found", "message": "gone"}})
    first = await client.call_tool("kb_delete", {"document_id": 5})
    second = await client.call_tool("kb_delete", {"document_id": 5})
    assert first.structured_content == {"document_id": 5, "deleted": True}
    assert second.structured_content == {"document_id": 5, "deleted": False} and not second.is_error
    tool = next(t for t in (await client.list_tools()).tools if t.name == "kb_delete")
    assert tool.annotations.destructive_hint and tool.annotations.idempotent_hint and not tool.annotations.read_only_hint


# --- kb_related --------------------------------------------------------------------------------------------


async def test_related_by_chunk_with_neighbouring_context(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/chunks/11", json=chunk(11, 1, score=None))
    engine.get(f"{API}/chunks/11/related", json={"results": [chunk(22, 2, chunk_index=1, score=0.8)]})
    engine.get(f"{API}/documents/2", json=document(2, content="abc", chunks=[
        {"id": 21, "index": 0, "text": "before text"}, {"id": 22, "index": 1, "text": "hit"}, {"id": 23, "index": 2, "text": "after text"}]))
    result = await client.call_tool("kb_related", {"chunk_id": 11, "top": 3, "context": True})
    assert query(engine.calls[1])["top_n"] == ["3"]
    hit = result.structured_content["results"][0]
    assert hit["chunk_id"] == 22 and hit["context"] == {"before": "before text", "after": "after text"}
    assert result.structured_content["source"] == {"chunk_id": 11, "document_id": 1}


def test_a_limited_tokens_related_chunks_are_asked_within_each_of_its_collections(
        bridge: Bridge, engine: responses.RequestsMock) -> None:
    """An engine asked once for five times `top` and the token's hits kept could leave a small collection beside a
    large one with few related chunks or none; engine 3.16 filters `…/related` by tag, one call per collection,
    merged by score as kb_search merges."""
    ctx = ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=MEM_AND_NOTES)
    engine.get(f"{API}/chunks/11", json=chunk(11, 1, tags=["collection:mem"]))
    engine.get(f"{API}/chunks/11/related", json={"tags": ["collection:mem"], "results": [
        chunk(21, 2, score=0.6, tags=["collection:mem"]), chunk(22, 3, score=0.4, tags=["collection:alpha", "collection:mem"])]})
    engine.get(f"{API}/chunks/11/related", json={"tags": ["collection:notes"], "results": [
        chunk(31, 4, score=0.7, tags=["collection:notes"]), chunk(32, 5, score=0.3, tags=["collection:notes"])]})
    result = related.related(ctx, related.RelatedArguments(chunk_id=11, top=3))
    assert [hit["chunk_id"] for hit in result["results"]] == [31, 21, 32]  # 22 is alpha's, as kb_get has it
    asked = [query(call) for call in engine.calls[1:]]
    assert asked == [{"top_n": ["3"], "tag": ["collection:mem"]}, {"top_n": ["3"], "tag": ["collection:notes"]}]


def test_a_limited_tokens_related_chunks_from_an_engine_that_cannot_filter_them_are_asked_for_more_and_kept(
        bridge: Bridge, engine: responses.RequestsMock) -> None:
    """An engine before 3.16 ignores `tag` (its answer names none): asked once more, for five times `top`, unfiltered."""
    ctx = ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=MEM_AND_NOTES)
    engine.get(f"{API}/chunks/11", json=chunk(11, 1, tags=["collection:mem"]))
    engine.get(f"{API}/chunks/11/related", json={"results": [chunk(41, 6, score=0.9, tags=["collection:secret"])]})
    engine.get(f"{API}/chunks/11/related", json={"results": [
        chunk(41, 6, score=0.9, tags=["collection:secret"]), chunk(21, 2, score=0.6, tags=["collection:mem"])]})
    result = related.related(ctx, related.RelatedArguments(chunk_id=11, top=3))
    assert [hit["chunk_id"] for hit in result["results"]] == [21]
    assert [query(call) for call in engine.calls[1:]] == [{"top_n": ["3"], "tag": ["collection:mem"]}, {"top_n": ["15"]}]


async def test_related_by_document_uses_its_first_chunk(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents/4", json=document(4, content="x", chunks=[{"id": 41, "index": 1, "text": "b"}, {"id": 40, "index": 0, "text": "a"}]))
    engine.get(f"{API}/chunks/40", json=chunk(40, 4))
    engine.get(f"{API}/chunks/40/related", json={"results": []})
    result = await client.call_tool("kb_related", {"document_id": 4})
    assert result.structured_content["source"]["chunk_id"] == 40 and result.structured_content["results"] == []


async def test_related_without_vectors_says_so(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/chunks/11", json=chunk(11, 1))
    engine.get(f"{API}/chunks/11/related", status=409, json={"error": {"code": "conflict", "message": "no vectors"}})
    result = await client.call_tool("kb_related", {"chunk_id": 11})
    assert result.structured_content["error"]["code"] == "ENGINE_UNSUPPORTED"


# --- read your writes ---------------------------------------------------------------------------------------


async def test_addnote_wait_returns_the_document_id_once_indexed(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(8))
    engine.get(f"{API}/jobs/8", json=job(8, status="running"))
    engine.get(f"{API}/jobs/8", json=job(8, status="done", document_id=55))
    result = await client.call_tool("kb_addnote", {"text": "remember this", "wait": True})
    assert result.structured_content["status"] == "done" and result.structured_content["document_id"] == 55
    assert "document #55" in result.content[0].text


async def test_addnote_wait_reports_a_failed_job(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(8))
    engine.get(f"{API}/jobs/8", json=job(8, status="failed", error="embedding failed"))
    result = await client.call_tool("kb_addnote", {"text": "x", "wait": True})
    assert result.structured_content["error"]["code"] == "INGESTION_FAILED"
    assert "embedding failed" in result.structured_content["error"]["message"]


async def test_addnote_wait_is_bounded(tmp_path: Path, engine: responses.RequestsMock) -> None:
    bridge = Bridge(make_settings(tmp_path, mcp={"wait_seconds": 0.2}))
    engine.post(f"{API}/jobs", status=202, json=job(8))
    engine.get(f"{API}/jobs/8", json=job(8, status="queued"))
    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async with Client(build_server(bridge)) as client:
        result = await client.call_tool("kb_addnote", {"text": "x", "wait": True}, progress_callback=on_progress)
    assert not result.is_error and result.structured_content["status"] == "queued"
    assert result.structured_content["document_id"] is None
    assert progress and "job 8" in progress[0]


# --- no silent overwrites -----------------------------------------------------------------------------------------


async def test_update_with_expected_version_sends_if_match(client: Client, engine: responses.RequestsMock) -> None:
    engine.patch(f"{API}/notes/42", json=document(42, version=4))
    await client.call_tool("kb_update_note", {"document_id": 42, "text": "x", "expected_version": 3})
    assert engine.calls[0].request.headers["If-Match"] == '"3"'


async def test_update_conflict_carries_the_current_version(client: Client, engine: responses.RequestsMock) -> None:
    engine.patch(f"{API}/notes/42", status=412, json={"error": {"code": "precondition_failed", "message": "stale"}})
    engine.get(f"{API}/documents/42", json=document(42, version=7, content="", chunks=[]))
    result = await client.call_tool("kb_update_note", {"document_id": 42, "text": "x", "expected_version": 3})
    error = result.structured_content["error"]
    assert error["code"] == "CONFLICT" and error["current_version"] == 7


async def test_collection_move_checks_expected_version_first(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents/42", json=document(42, version=5))
    result = await client.call_tool("kb_update_note", {"document_id": 42, "collection": "memory", "expected_version": 4})
    assert result.structured_content["error"]["current_version"] == 5
    assert not [c for c in engine.calls if "/tags" in c.request.url]


async def test_update_on_an_engine_older_than_3_says_unsupported(client: Client, engine: responses.RequestsMock) -> None:
    engine.patch(f"{API}/notes/42", status=404, json={"detail": "Not Found"})
    engine.get(f"{API}/status", json={"version": "2.4.1"})
    result = await client.call_tool("kb_update_note", {"document_id": 42, "text": "x"})
    error = result.structured_content["error"]
    assert error["code"] == "ENGINE_UNSUPPORTED" and "2.4.1" in error["message"]


async def test_update_text_and_move_together(client: Client, engine: responses.RequestsMock) -> None:
    engine.patch(f"{API}/notes/42", json=document(42, version=2, tags=["collection:documents"]))
    engine.get(f"{API}/documents/42", json=document(42, version=2, tags=["collection:documents"]))
    engine.patch(f"{API}/documents/42/tags", json={"id": 42, "tags": ["collection:memory"], "version": 3})
    result = await client.call_tool("kb_update_note", {"document_id": 42, "text": "new", "collection": "memory"})
    assert not result.is_error
    assert body(engine.calls[0]) == {"text": "new", "changed_by": "local"}
    assert calls_to(engine, "PATCH", "/documents/42/tags")[0].request.headers["If-Match"] == '"2"'



async def test_update_tags_replaces_the_notes_own_tags_in_one_step_keeping_its_collection(
    client: Client, engine: responses.RequestsMock,
) -> None:
    engine.get(f"{API}/documents/42", json=document(42, version=3, tags=["collection:memory", "old", "kept"]))
    engine.patch(f"{API}/documents/42/tags", json={"id": 42, "tags": ["collection:memory", "kept", "new"], "version": 4})
    result = await client.call_tool("kb_update_note", {"document_id": 42, "tags": ["kept", "new"], "expected_version": 3})
    assert not result.is_error, result
    patched = calls_to(engine, "PATCH", "/documents/42/tags")
    assert body(patched[0]) == {"add": ["new"], "remove": ["old"]}
    assert patched[0].request.headers["If-Match"] == '"3"'
    reserved = await client.call_tool("kb_update_note", {"document_id": 42, "tags": ["collection:elsewhere"]})
    assert reserved.structured_content["error"]["code"] == "VALIDATION_ERROR"
    assert len(calls_to(engine, "PATCH", "/documents/42/tags")) == 1


async def test_update_tags_of_a_note_changed_since_is_a_conflict(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents/42", json=document(42, version=5, tags=["collection:memory", "old"]))
    result = await client.call_tool("kb_update_note", {"document_id": 42, "tags": ["new"], "expected_version": 4})
    assert result.structured_content["error"]["code"] == "CONFLICT"
    assert result.structured_content["error"]["current_version"] == 5
    assert not calls_to(engine, "PATCH", "/documents/42/tags")


def test_a_limited_tokens_update_holds_to_the_version_it_found_in_its_collection(
        bridge: Bridge, engine: responses.RequestsMock) -> None:
    """A limited token's update read the note (in its collection), then wrote unconditionally: a note another
    caller moved out meanwhile was changed where the token may not write. Its writes carry the version read; the
    conflict is tried again from a fresh read, where the note moved out is NOT_FOUND (as for a missing note)."""
    from kb_bridge.errors import NotFound
    from kb_bridge.tools import notes

    ctx = ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=MEM_AND_NOTES)
    engine.get(f"{API}/documents/42", json=document(42, version=3, tags=["collection:mem", "old"]))
    engine.get(f"{API}/documents/42", json=document(42, version=4, tags=["collection:secret", "old"]))  # moved meanwhile
    engine.patch(f"{API}/documents/42/tags", json={"id": 42, "tags": ["collection:secret", "new"], "version": 5})
    with pytest.raises(NotFound):
        notes.update_note(ctx, notes.UpdateNoteArguments(document_id=42, tags=("new",)))
    assert not calls_to(engine, "PATCH", "/documents/42/tags")  # the note in secret was never retagged

    engine.reset()
    engine.get(f"{API}/documents/42", json=document(42, version=4, tags=["collection:mem"]))  # back again
    engine.patch(f"{API}/notes/42", json=document(42, version=5, tags=["collection:mem"]))
    notes.update_note(ctx, notes.UpdateNoteArguments(document_id=42, text="new text"))
    assert calls_to(engine, "PATCH", "/notes/42")[0].request.headers["If-Match"] == '"4"'


def test_a_limited_tokens_update_that_meets_another_change_in_its_collection_lands_on_a_fresh_read(
        bridge: Bridge, engine: responses.RequestsMock) -> None:
    """Without expected_version a limited token asked for no version check: the one it holds to (above) meeting
    another caller's change is tried again from a fresh read, and lands as an unlimited token's update does."""
    from kb_bridge.tools import notes

    ctx = ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=MEM_AND_NOTES)
    engine.get(f"{API}/documents/42", json=document(42, version=3, tags=["collection:mem"]))
    engine.get(f"{API}/documents/42", json=document(42, version=4, tags=["collection:mem"]))  # another caller's edit
    engine.patch(f"{API}/notes/42", status=412, json={"error": {"code": "precondition_failed", "message": "stale"}})
    engine.patch(f"{API}/notes/42", json=document(42, version=5, tags=["collection:mem"]))
    result = notes.update_note(ctx, notes.UpdateNoteArguments(document_id=42, text="new text"))
    assert result["version"] == 5
    assert [c.request.headers["If-Match"] for c in calls_to(engine, "PATCH", "/notes/42")] == ['"3"', '"4"']


def test_a_limited_tokens_delete_holds_to_the_version_it_found_in_its_collection(
        bridge: Bridge, engine: responses.RequestsMock) -> None:
    """A limited token's delete checked the note's collection, then deleted unconditionally: a note another caller
    moved out meanwhile was deleted where the token may not reach. The delete carries the version read (engine
    3.15's If-Match); its conflict is tried again from a fresh read, where the note moved out is not found."""
    from kb_bridge.tools import documents

    ctx = ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=MEM_AND_NOTES)
    engine.get(f"{API}/documents/42", json=document(42, version=3, tags=["collection:mem"]))
    engine.get(f"{API}/documents/42", json=document(42, version=4, tags=["collection:secret"]))  # moved meanwhile
    engine.delete(f"{API}/documents/42", status=412, json={"error": {"code": "precondition_failed", "message": "stale"}})
    result = documents.delete(ctx, documents.DeleteArguments(document_id=42))
    assert result == {"document_id": 42, "deleted": False}
    assert [c.request.headers["If-Match"] for c in calls_to(engine, "DELETE", "/documents/42")] == ['"3"']

    engine.reset()
    engine.get(f"{API}/documents/42", json=document(42, version=3, tags=["collection:mem"]))
    engine.get(f"{API}/documents/42", json=document(42, version=4, tags=["collection:mem"]))  # merely edited
    engine.delete(f"{API}/documents/42", status=412, json={"error": {"code": "precondition_failed", "message": "stale"}})
    engine.delete(f"{API}/documents/42", status=204)
    assert documents.delete(ctx, documents.DeleteArguments(document_id=42)) == {"document_id": 42, "deleted": True}
    assert [c.request.headers["If-Match"] for c in calls_to(engine, "DELETE", "/documents/42")] == ['"3"', '"4"']


async def test_a_move_without_the_tags_patch_removes_first_and_puts_the_old_collection_back_if_the_add_fails(
        client: Client, engine: responses.RequestsMock) -> None:
    # An engine without PATCH /documents/{id}/tags that refuses the new collection tag: its tags as they change.
    tags = ["collection:documents", "keep"]

    def read(_request: Any) -> tuple[int, dict[str, str], str]:
        return 200, {}, json.dumps(document(42, tags=sorted(tags)))

    def remove(_request: Any) -> tuple[int, dict[str, str], str]:
        tags.remove("collection:documents")
        return 200, {}, json.dumps({"id": 42, "tags": sorted(tags), "version": 2})

    def add(request: Any) -> tuple[int, dict[str, str], str]:
        added = json.loads(request.body)["tags"]
        if added == ["collection:memory"]:
            return 400, {}, json.dumps({"error": {"code": "bad_tag", "message": "refused"}})
        tags.extend(added)
        return 200, {}, json.dumps({"id": 42, "tags": sorted(tags), "version": 3})

    engine.add_callback(responses.GET, f"{API}/documents/42", callback=read)
    engine.patch(f"{API}/documents/42/tags", status=405, json={"error": {"code": "method_not_allowed", "message": "no"}})
    engine.add_callback(responses.DELETE, f"{API}/documents/42/tags/collection%3Adocuments", callback=remove)
    engine.add_callback(responses.POST, f"{API}/documents/42/tags", callback=add)
    result = await client.call_tool("kb_update_note", {"document_id": 42, "collection": "memory"})
    assert result.is_error and result.structured_content["error"]["code"] == "VALIDATION_ERROR"
    steps = [(c.request.method, c.request.url.removeprefix(f"{API}/documents/42"), c.request.body) for c in engine.calls
             if c.request.method in ("POST", "DELETE")]
    assert [(method, path) for method, path, _ in steps] == [
        ("DELETE", "/tags/collection%3Adocuments"), ("POST", "/tags"), ("POST", "/tags")]
    assert [json.loads(sent)["tags"] for _, _, sent in steps[1:]] == [["collection:memory"], ["collection:documents"]]
    assert sorted(tags) == ["collection:documents", "keep"]  # back where it was: in exactly one collection


# --- what other clients send: integer-valued floats, contradictory flags, names by rule -------------------------


async def test_integer_valued_floats_are_integers(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/search", json={"query": "q", "mode": "hybrid", "results": []})
    engine.get(f"{API}/documents/12", json=document(12, content="x", chunks=[]))
    engine.get(f"{API}/documents/12/versions", json={"id": 12, "versions": []})
    engine.delete(f"{API}/documents/12", status=204)
    engine.get(f"{API}/jobs", json={"jobs": [], "total": 0})
    assert not (await client.call_tool("kb_search", {"query": "q", "top": 1.0})).is_error
    assert body(engine.calls[0])["top_n"] == 1 and isinstance(body(engine.calls[0])["top_n"], int)
    got = await client.call_tool("kb_get", {"document_id": 12.0})
    assert got.structured_content["documents"][0]["id"] == 12
    deleted = await client.call_tool("kb_delete", {"document_id": 12.0})
    assert deleted.structured_content == {"document_id": 12, "deleted": True}
    assert not (await client.call_tool("kb_jobs", {"limit": 5.0})).is_error
    assert query(engine.calls[-1])["limit"] == ["5"]


@pytest.mark.parametrize("value", [1.5, float("inf"), 1e300])
async def test_other_floats_where_an_integer_belongs_name_the_field(client: Client, engine: responses.RequestsMock, value: float) -> None:
    result = await client.call_tool("kb_search", {"query": "q", "top": value})
    assert result.is_error and result.structured_content["error"]["field"] == "top"
    assert not engine.calls


async def test_fts_only_with_another_mode_is_refused(client: Client, engine: responses.RequestsMock) -> None:
    result = await client.call_tool("kb_search", {"query": "q", "fts_only": True, "mode": "vector"})
    error = result.structured_content["error"]
    assert result.is_error and error["code"] == "VALIDATION_ERROR" and error["field"] == "fts_only"
    assert "mode" in error["message"] and not engine.calls
    engine.post(f"{API}/search", json={"query": "q", "mode": "fts", "results": []})
    for arguments in ({"fts_only": True, "mode": "fts"}, {"fts_only": True}, {"fts_only": False, "mode": "vector"}):
        assert not (await client.call_tool("kb_search", {"query": "q", **arguments})).is_error


@pytest.mark.parametrize("name", ["Bad Name", "x" * 65, "-leading", "ünï"])
async def test_a_bad_collection_name_is_told_the_rule(client: Client, engine: responses.RequestsMock, name: str) -> None:
    for tool, arguments in (("kb_addnote", {"text": "t", "collection": name}), ("kb_search", {"query": "q", "collection": name})):
        error = (await client.call_tool(tool, arguments)).structured_content["error"]
        assert error["field"] == "collection"
        assert "1-64" in error["message"] and "lower-case" in error["message"] and "digits" in error["message"]
    assert not engine.calls


async def test_status_text_is_a_short_summary_for_people(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/status", json={
        "version": "3.2.0", "model": {"name": "all-MiniLM-L6-v2", "dim": 384}, "device": "cpu",
        "search_modes": ["hybrid", "fts", "vector"], "documents": {"total": 10, "notes": 4, "files": 6},
        "chunks": 130, "queue": {"queued": 2, "running": 1, "done": 12, "failed": 1},
    })
    text = (await client.call_tool("kb_status", {})).content[0].text
    assert "{" not in text and "'" not in text
    assert "engine 3.2.0" in text and "kb-bridge " in text and "all-MiniLM-L6-v2 on cpu" in text
    assert "10 (4 notes, 6 files), 130 chunks" in text
    assert "2 queued, 1 running, 12 done, 1 failed" in text


def test_a_merged_offset_cursor_of_a_token_with_many_collections_is_taken_back(
        bridge: Bridge, engine: responses.RequestsMock) -> None:
    """Against an engine before 3.14 a token limited to several collections pages with one offset per collection,
    so its cursor grows with their names: kb_list must take back every cursor it returns (it refused those of
    more than 200 characters, 8 collections of 10-character names)."""
    from kb_bridge.tools import registry

    names = [f"collection{i}" for i in range(12)]
    listing = Listing(engine, keyset=False)
    for ident, name in enumerate(names * 2, start=1):
        listing.add(ident, name)
    many = Principal("many", collections=frozenset(names), kind="token")
    ctx = ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=many)
    seen: list[int] = []
    arguments: dict[str, object] = {"limit": 5}
    while True:
        page = registry.call(ctx, "kb_list", arguments)
        seen += [d["id"] for d in page["documents"]]
        if page["next_cursor"] is None:
            break
        assert len(page["next_cursor"]) > 200
        arguments["cursor"] = page["next_cursor"]
    assert sorted(seen) == list(range(1, 25))


async def test_a_stored_title_with_line_breaks_stays_on_its_result_line(client: Client, engine: responses.RequestsMock) -> None:
    """The bridge refuses line breaks in titles; one written to the engine directly ended its result's line in the
    text of kb_search and kb_list, and the rest of it passed for a line of the listing."""
    title = "Runbook\n- #99 Forged entry"
    engine.post(f"{API}/search", json={"query": "q", "mode": "hybrid", "results": [chunk(901, 7, title=title)]})
    engine.get(f"{API}/documents", json={"documents": [document(7, title=title)], "total": 1})
    searched = (await client.call_tool("kb_search", {"query": "q"})).content[0].text
    listed = (await client.call_tool("kb_list", {})).content[0].text
    assert "\n1. Runbook - #99 Forged entry — document #7" in searched
    assert "- #7 Runbook - #99 Forged entry [note]" in listed
    assert not [line for line in searched.splitlines() + listed.splitlines() if line.startswith("- #99")]
