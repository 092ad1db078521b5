"""Every document of a listing (GET /api/v1/documents, newest update first), page by page, each once, for
`kb-bridge export` and `import` (cli/transfer.py), while others change the knowledge base.

Paging by offset loses documents: one deleted among those already listed moves every later one up a place,
so the next page starts a document too far. Pages here are bounded by time instead (engine 3.8's
`updated_before`, exclusive): the next page is what was updated before the oldest instant of the page, that
instant included, since several documents can share one (a batch of jobs finishes in one commit); those
already listed are dropped. Deleting or adding documents moves none across that bound. A page of more
documents at one instant than fit is read through by offset, within that instant alone. An engine before
3.8 ignores time bounds: against one, the listing pages by offset as before.

A document updated during the listing moves above every bound: `pages(updated_after=...)` lists what was
updated from a given instant on, for the caller to pick those up (export does).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from kb_bridge import shapes
from kb_bridge.client.engine import EngineClient

PAGE = 100
STEP = timedelta(milliseconds=1)  # the engine stores times to the millisecond (docs/engine-api.md)

Page = tuple[list[dict[str, Any]], int | None]  # documents not listed before, and the total the engine reported


class Listing:
    """The documents of one collection (or all), each listed once across every `pages` call."""

    def __init__(self, client: EngineClient, tag: str | None) -> None:
        self.client, self.tag = client, tag
        self.seen: set[int] = set()
        self.by_time = False  # whether the engine applies time bounds (3.8)
        self.started: str | None = None  # the latest updated_at of the last call's first page

    def pages(self, updated_after: str | None = None) -> Iterator[Page]:
        """The documents (updated at or after `updated_after`, which needs `by_time`) not listed before,
        page by page."""
        client, seen = self.client, self.seen
        base: list[tuple[str, Any]] = [("limit", PAGE)] + ([("tag", self.tag)] if self.tag else [])
        if updated_after is not None:
            base.append(("updated_after", updated_after))
        raw = client.list_documents(base)
        page = shapes.listed(raw, "documents")
        total = raw.get("total") if isinstance(raw.get("total"), int) else None
        self.by_time = isinstance(raw.get("time_filters"), dict)  # an engine before 3.8 ignores time bounds
        self.started = _newest(page) or self.started
        yield _new(page, seen), total
        if len(page) < PAGE:
            return
        if not self.by_time:
            yield from _by_offset(client, base, PAGE, seen)
            return
        before: datetime | None = None
        while len(page) == PAGE:
            times = [_time(item) for item in page]
            known = [moment for moment in times if moment is not None]
            if len(known) < len(times):  # a document without a time cannot be bounded: on by offset, as before
                yield from _by_offset(client, [*base, *_bound(before)], PAGE, seen)
                return
            oldest, newest = min(known), max(known)
            try:
                just_after: datetime | None = oldest + STEP
            except OverflowError:  # the last millisecond of year 9999
                just_after = None
            end = just_after if before is None or (just_after is not None and just_after < before) else before
            if just_after is None or oldest == newest or end != just_after:
                # The page is one instant (or the engine's times are finer than a millisecond): the next
                # bound would not move, so that instant is read through by offset, then passed.
                yield from _by_offset(client, [*base, ("updated_after", _iso(oldest)), *_bound(end)], 0, seen)
                before = oldest
            else:
                before = just_after
            page = shapes.listed(client.list_documents([*base, *_bound(before)]), "documents")
            yield _new(page, seen), total


def _newest(page: list[Any]) -> str | None:
    """The latest updated_at of a page as the engine wrote it (None for an empty page)."""
    found = [(moment, item["updated_at"]) for item in page if (moment := _time(item)) is not None]
    return max(found)[1] if found else None


def _by_offset(client: EngineClient, params: list[tuple[str, Any]], offset: int, seen: set[int]) -> Iterator[Page]:
    while True:
        page = shapes.listed(client.list_documents([*params, ("offset", offset)]), "documents")
        yield _new(page, seen), None
        if len(page) < PAGE:
            return
        offset += len(page)
def _new(page: list[Any], seen: set[int]) -> list[dict[str, Any]]:
    fresh = []
    for item in page:
        document_id = item.get("id") if isinstance(item, dict) else None
        if isinstance(document_id, int) and document_id not in seen:
            seen.add(document_id)
            fresh.append(item)
    return fresh


def _time(item: Any) -> datetime | None:
    value = item.get("updated_at") if isinstance(item, dict) else None
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _bound(before: datetime | None) -> list[tuple[str, Any]]:
    return [("updated_before", _iso(before))] if before is not None else []


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")
