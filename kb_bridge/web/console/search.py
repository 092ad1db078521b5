"""The console's home: search, one hit per document with a snippet of its best chunk."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flask import redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from kb_bridge.web.console.state import blueprint, call, usable

SNIPPET = 300


@blueprint.get("/")
def home() -> ResponseReturnValue:
    return redirect(url_for("console.search"))


@blueprint.get("/search")
def search() -> ResponseReturnValue:
    query = request.args.get("q", "").strip()
    collection = request.args.get("collection") or None
    results: list[dict[str, Any]] = []
    if query and usable("kb_search"):
        arguments: dict[str, Any] = {"query": query, "top": 30}
        if collection:
            arguments["collection"] = collection
        results = list(_best_per_document(call("kb_search", arguments)["results"]))
    return render_template("search.html", title=f"Search: {query}" if query else "Search", query=query,
                           collection=collection or "", results=results, searched=bool(query))


def _best_per_document(hits: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    seen: set[int] = set()
    for hit in hits:
        if hit["document_id"] in seen:
            continue
        seen.add(hit["document_id"])
        text = " ".join(str(hit.get("text") or "").split())
        yield {**hit, "snippet": text if len(text) <= SNIPPET else text[: SNIPPET - 1] + "…"}
