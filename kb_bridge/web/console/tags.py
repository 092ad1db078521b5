"""Tags per collection: for each collection the principal sees, its documents' own tags with how many
documents carry each, each linking to those documents (the collection page filtered by the tag)."""

from __future__ import annotations

from flask import render_template, request
from flask.typing import ResponseReturnValue

from kb_bridge.tools.browse import tags_by_collection
from kb_bridge.tools.spec import ToolContext
from kb_bridge.web.console.state import blueprint, current_console, principal, require


@blueprint.get("/tags")
def tags_page() -> ResponseReturnValue:
    # What kb_collections and kb_list show, counted by tag: the page needs both tools, as its links do.
    require("kb_collections", "kb_list")
    bridge = current_console().bridge
    ctx = ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=principal())
    with bridge.engine.deadline(bridge.settings.engine.call_deadline()):
        found, more = tags_by_collection(ctx, request.args.get("after") or None)
    return render_template("tags.html", title="Tags", collections=found, more=more)
