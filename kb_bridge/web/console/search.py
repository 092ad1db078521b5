"""The console's search page: kb_search's filters (collection, mode, tags, a time range on created or updated),
the hits grouped by document with their scores and the passage that matched (engine 3.11 `snippet`) marked,
a page of documents at a time.

One search asks for kb_search's most hits (TOP) and groups them by document in the order of each document's
best hit; a page shows PAGE of those documents, and every page runs the same search again (the URL holds the
filters and the page, nothing is kept between requests). So the count says what it counts: the documents in
the top hits of this search, not every document that shares a word with the query.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flask import redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from kb_bridge.digits import ascii_number
from kb_bridge.errors import Forbidden, InvalidArgument
from kb_bridge.web.console.state import blueprint, call, principal, usable

PAGE = 10  # documents per page
TOP = 50  # hits per search: kb_search's most (tools/arguments.py, TOP)
MODES = ("hybrid", "fts", "vector")
TIME_FIELDS = ("created", "updated")
SNIPPET = 240  # characters of a hit's text shown when the engine sends no snippet (older than 3.11)
_MAX_PAGE = -(-TOP // PAGE)  # a search holds at most TOP documents


@dataclass(frozen=True)
class Filters:
    """The search as the URL gives it (every field a string as typed, so the form shows it back)."""

    query: str = ""
    collection: str = ""
    mode: str = "hybrid"
    tags: str = ""
    time_field: str = "created"
    since: str = ""
    until: str = ""
    page: int = 1

    @classmethod
    def from_args(cls, args: Mapping[str, str]) -> Filters:
        page = args.get("page", "")
        return cls(query=args.get("q", "").strip(), collection=args.get("collection", "").strip(),
                   mode=args.get("mode", "").strip() or "hybrid", tags=args.get("tags", "").strip(),
                   time_field=args.get("time_field", "").strip() or "created", since=args.get("since", "").strip(),
                   until=args.get("until", "").strip(),
                   page=_page_number(page))

    @property
    def narrowed(self) -> bool:
        """Any filter given (the page then shows the filters open)."""
        return bool(self.collection or self.mode != "hybrid" or self.tags or self.since or self.until)

    def tag_list(self) -> list[str]:
        return [tag for tag in (part.strip() for part in self.tags.split(",")) if tag]

    def arguments(self) -> dict[str, Any]:
        """kb_search's arguments; the tool validates them as it validates an agent's."""
        arguments: dict[str, Any] = {"query": self.query, "top": TOP, "mode": self.mode}
        if self.collection:
            arguments["collection"] = self.collection
        if self.tag_list():
            arguments["tags"] = self.tag_list()
        if self.since or self.until:
            arguments["time_field"] = self.time_field
        if self.since:
            arguments["since"] = self.since
        if self.until:
            arguments["until"] = self.until
        return arguments

    def url_args(self, page: int) -> dict[str, Any]:
        """The query string of this search at `page`: only the filters given."""
        found = {"q": self.query, "collection": self.collection, "mode": self.mode if self.mode != "hybrid" else "",
                 "tags": self.tags, "time_field": self.time_field if self.since or self.until else "",
                 "since": self.since, "until": self.until, "page": str(page) if page > 1 else ""}
        return {key: value for key, value in found.items() if value}


def _page_number(text: str) -> int:
    """The page asked for: 1 unless `text` is a plain positive number; at most the last page there can be."""
    page = ascii_number(text, 4)
    return 1 if page is None else min(max(page, 1), _MAX_PAGE)


@blueprint.get("/")
def home() -> ResponseReturnValue:
    return redirect(url_for("console.search"))


@blueprint.get("/search")
def search() -> ResponseReturnValue:
    filters = Filters.from_args(request.args)
    collections = _collections()
    if filters.collection and filters.collection not in collections:
        collections.append(filters.collection)
    view: dict[str, Any] = {"filters": filters, "collections": collections, "modes": MODES,
                            "time_fields": TIME_FIELDS, "searched": False, "error": None}
    status = 200
    if filters.query and usable("kb_search"):
        try:
            if filters.collection and not principal().sees(filters.collection):
                raise Forbidden(f"this token may not search the collection {filters.collection!r}")
            result = call("kb_search", filters.arguments())
        except (InvalidArgument, Forbidden) as exc:
            view["error"], status = exc.message, exc.http_status
        else:
            view.update(_results(filters, result))
    title = f"Search: {filters.query}" if filters.query else "Search"
    return render_template("search.html", title=title, **view), status


def _collections() -> list[str]:
    """The collections this principal may search (kb_collections lists only those)."""
    if not usable("kb_collections"):
        return []
    return sorted(str(found["name"]) for found in call("kb_collections", {})["collections"])


def _results(filters: Filters, result: Mapping[str, Any]) -> dict[str, Any]:
    hits: list[dict[str, Any]] = list(result["results"])
    documents = _grouped(hits)
    pages = max(1, -(-len(documents) // PAGE))
    page = min(filters.page, pages)
    first = (page - 1) * PAGE
    return {"searched": True, "mode": result["mode"], "hits": len(hits), "top": TOP, "documents": len(documents),
            "groups": documents[first:first + PAGE], "first": first + 1, "page": page, "pages": pages,
            "previous": url_for("console.search", **filters.url_args(page - 1)) if page > 1 else None,
            "next": url_for("console.search", **filters.url_args(page + 1)) if page < pages else None}


def _grouped(hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per document, in the order of its best hit, with its hits best first."""
    groups: dict[int, dict[str, Any]] = {}
    for hit in hits:
        group = groups.setdefault(hit["document_id"], {"document": hit, "hits": []})
        group["hits"].append({**hit, "passage": passage(hit)})
    return list(groups.values())


def passage(hit: Mapping[str, Any]) -> dict[str, Any]:
    """The hit's snippet as parts to show, each (text, marked), and whether the text goes on before and after
    it. Parts are plain strings: the template escapes them and wraps the marked ones in <mark>."""
    text = str(hit.get("text") or "")
    snippet = hit.get("snippet")
    if not isinstance(snippet, Mapping):  # an engine older than 3.11: the start of the text, unmarked
        shown = text[:SNIPPET]
        return {"before": False, "parts": [(shown, False)], "after": len(text) > len(shown)}
    shown, start = str(snippet["text"]), int(snippet["start"])
    parts: list[tuple[str, bool]] = []
    at = 0
    for begin, end in snippet["highlights"]:
        if begin < at:  # overlapping or out of order: shapes.search_hit checked bounds, not order
            continue
        parts.extend([(shown[at:begin], False), (shown[begin:end], True)])
        at = end
    parts.append((shown[at:], False))
    # tantivy's passage starts and ends on a word, so what lies beyond it may be punctuation alone: that is
    # shown, and an ellipsis says only that words were left out.
    head, tail = text[:start], text[start + len(shown):]
    before, after = _has_word(head), _has_word(tail)
    if not before:
        parts.insert(0, (head.lstrip(), False))
    if not after:
        parts.append((tail.rstrip(), False))
    return {"before": before, "parts": [part for part in parts if part[0]], "after": after}


def _has_word(text: str) -> bool:
    return any(character.isalnum() for character in text)
