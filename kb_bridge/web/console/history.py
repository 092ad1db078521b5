"""A note's history: one earlier version's text, and restoring it. Reading is kb_get with a version;
restoring is kb_update_note with that version's text and title, guarded by the version the page showed as
current (a note changed meanwhile is refused, nothing overwritten), as an agent restores one."""

from __future__ import annotations

from flask import redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from kb_bridge.errors import Conflict
from kb_bridge.web.console.state import LOST_VERSION, blueprint, call, require, whole_number


@blueprint.get("/documents/<int:document_id>/versions/<int:version>")
def version(document_id: int, version: int) -> ResponseReturnValue:
    current = call("kb_get", {"document_id": document_id})["documents"][0]
    found = call("kb_get", {"document_id": document_id, "version": version})["documents"][0]
    return render_template("version.html", title=f"Version {version} of {current['title'] or document_id}",
                           doc=current, old=found, conflict=None)


@blueprint.post("/documents/<int:document_id>/versions/<int:version>")
def restore(document_id: int, version: int) -> ResponseReturnValue:
    require("kb_update_note")
    current_version = whole_number(request.form.get("current", ""), LOST_VERSION)
    found = call("kb_get", {"document_id": document_id, "version": version})["documents"][0]
    changes = {"text": found["content"] or "", **({"title": found["title"]} if found["title"] else {})}
    try:
        call("kb_update_note", {"document_id": document_id, **changes, "expected_version": current_version})
    except Conflict as exc:
        if exc.code != "CONFLICT":
            raise
        current = call("kb_get", {"document_id": document_id})["documents"][0]
        conflict = (f"This note changed since you loaded it (it is now version {current['version']}); "
                    "nothing was restored. Look at the new version before restoring again.")
        return render_template("version.html", title=f"Version {version}", doc=current, old=found,
                               conflict=conflict), 409
    return redirect(url_for("console.document", document_id=document_id, saved="1"))
