"""Which documents a tool's result points at, so the MCP layer can add a `resource_link` per document
(issue 38 item 4): a client can then open a hit with resources/read instead of a second tool call.

Kept as data beside the tools, keyed by tool name, so the tool modules stay as they are: a search hit and
a related chunk name their document by `document_id`, a listed document by `id`. The first link for a
document wins (a search often returns several chunks of one document).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kb_bridge.tools.spec import Result


@dataclass(frozen=True)
class DocumentLink:
    document_id: int
    title: str | None


Linker = Callable[[Result], list[DocumentLink]]


def _from(items_key: str, id_key: str) -> Linker:
    def links(result: Result) -> list[DocumentLink]:
        seen: dict[int, DocumentLink] = {}
        items: Any = result.get(items_key)
        for item in items if isinstance(items, list) else ():
            ident = item.get(id_key) if isinstance(item, dict) else None
            if isinstance(ident, int) and not isinstance(ident, bool) and ident not in seen:
                title = item.get("title") or item.get("source_path")
                seen[ident] = DocumentLink(ident, title if isinstance(title, str) else None)
        return list(seen.values())

    return links


LINKERS: dict[str, Linker] = {
    "kb_search": _from("results", "document_id"),
    "kb_related": _from("results", "document_id"),
    "kb_list": _from("documents", "id"),
}


def document_links(tool: str, result: Result) -> list[DocumentLink]:
    """The documents `tool`'s result points at, first mention first (none for other tools)."""
    linker = LINKERS.get(tool)
    return linker(result) if linker is not None else []
