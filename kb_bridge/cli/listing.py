"""Every document of a listing (GET /api/v1/documents, newest update first), page by page, each once, for
`kb-bridge export` and `import` (cli/transfer.py) and `ingest`'s plan (cli/ingest_plan.py), while others change
the knowledge base.

Paging by offset loses documents: one deleted among those already listed moves every later one up a place,
so the next page starts a document too far. Pages here follow the last document's key instead (engine 3.14's
`after`, the key kb_list's cursors hold: tools/cursors.py): documents added, deleted or updated before it move
nothing after it. An engine before 3.14 answers no `after`, and is paged by offset as before.

A document updated during the listing moves ahead of the key: `pages(updated_after=...)` lists what was
updated from a given instant on (engine 3.8's time bounds), for the caller to pick those up (export does).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kb_bridge import shapes
from kb_bridge.client.engine import EngineClient
from kb_bridge.tools.cursors import key_of

PAGE = 100

Page = tuple[list[dict[str, Any]], int | None]  # documents not listed before, and the total the engine reported


class Listing:
    """The documents of one collection (or all), each listed once across every `pages` call."""

    def __init__(self, client: EngineClient, tag: str | None, page_size: int = PAGE) -> None:
        self.client, self.tag, self.page_size = client, tag, page_size
        self.seen: set[int] = set()
        self.by_time = False  # whether the engine applies time bounds (3.8)
        self.started: str | None = None  # the latest updated_at of the last call's first page

    def pages(self, updated_after: str | None = None) -> Iterator[Page]:
        """The documents (updated at or after `updated_after`, which needs `by_time`) not listed before,
        page by page."""
        base: list[tuple[str, Any]] = [("limit", self.page_size)] + ([("tag", self.tag)] if self.tag else [])
        if updated_after is not None:
            base.append(("updated_after", updated_after))
        raw = self.client.list_documents(base)
        page = shapes.listed(raw, "documents")
        total = raw.get("total") if isinstance(raw.get("total"), int) else None
        self.by_time = isinstance(raw.get("time_filters"), dict)  # an engine before 3.8 ignores time bounds
        keyed = "after" in raw  # an engine of 3.14 or later answers `after` (null when not asked)
        self.started = _newest(page) or self.started
        yield self._new(page), total
        offset = len(page)
        while len(page) == self.page_size:
            key = key_of(page[-1]) if keyed else None
            # A document without a key's fields (an engine writing other times) leaves the rest to offsets.
            step = ("after", key.param()) if key is not None else ("offset", offset)
            page = shapes.listed(self.client.list_documents([*base, step]), "documents")
            offset += len(page)
            yield self._new(page), None

    def _new(self, page: list[Any]) -> list[dict[str, Any]]:
        fresh = []
        for item in page:
            document_id = item.get("id") if isinstance(item, dict) else None
            if isinstance(document_id, int) and document_id not in self.seen:
                self.seen.add(document_id)
                fresh.append(item)
        return fresh


def _newest(page: list[Any]) -> str | None:
    """The latest updated_at of a page as the engine wrote it (None for an empty page): the listing's first."""
    keys = [key for item in page if isinstance(item, dict) and (key := key_of(item)) is not None]
    return max(keys, key=lambda key: (key.updated_at, key.id)).updated_at if keys else None
