"""Collections and the documents in one, a page at a time."""

from __future__ import annotations

from flask import render_template, request
from flask.typing import ResponseReturnValue

from kb_bridge.web.console.state import blueprint, call


@blueprint.get("/collections")
def collections_page() -> ResponseReturnValue:
    found = call("kb_collections", {})["collections"]
    return render_template("collections.html", title="Collections", collections=found)


@blueprint.get("/collections/<name>")
def collection_page(name: str) -> ResponseReturnValue:
    cursor = request.args.get("cursor")
    tag = request.args.get("tag")  # from the tags page: the documents of this collection with that tag
    listed = call("kb_list", {"collection": name, "limit": 100, **({"cursor": cursor} if cursor else {}),
                              **({"tags": [tag]} if tag else {})})
    heading = f"Collection {name}" + (f", tag {tag}" if tag else "")
    return render_template("collection.html", title=heading, heading=heading, name=name, tag=tag, listed=listed)
