"""One document: read it, save a note's new text (refused without overwriting when the note changed since
it was loaded), delete it after a confirmation."""

from __future__ import annotations

from flask import redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from kb_bridge.errors import Conflict
from kb_bridge.web.console.choices import collection_choices
from kb_bridge.web.console.state import LOST_VERSION, blueprint, call, require, usable, whole_number
from kb_bridge.web.console.writing import MEMORY


@blueprint.get("/documents/<int:document_id>")
def document(document_id: int) -> ResponseReturnValue:
    found = call("kb_get", {"document_id": document_id})["documents"][0]
    # The details form (writing.py) offers the collections a note may move to.
    curating = found["doc_type"] in (None, "note") and usable("kb_update_note")
    return render_template("document.html", title=found["title"] or f"Document {document_id}", doc=found,
                           text=found.get("content") or "", version=found["version"], conflict=None,
                           saved=request.args.get("saved"), collections=collection_choices(MEMORY) if curating else [])


@blueprint.post("/documents/<int:document_id>")
def save(document_id: int) -> ResponseReturnValue:
    require("kb_update_note")
    text = request.form.get("text", "")
    version = whole_number(request.form.get("version", ""), LOST_VERSION)
    try:
        call("kb_update_note", {"document_id": document_id, "text": text, "expected_version": version})
    except Conflict as exc:
        if exc.code != "CONFLICT":
            raise
        current = call("kb_get", {"document_id": document_id})["documents"][0]
        conflict = (f"This note changed since you loaded it (it is now version {current['version']}). "
                    "Nothing was overwritten; your text is kept below. Copy it, reload the note, and apply your change again.")
        return render_template("document.html", title=current["title"] or f"Document {document_id}", doc=current,
                               text=text, version=version, conflict=conflict, saved=None), 409
    return redirect(url_for("console.document", document_id=document_id, saved="1"))


@blueprint.route("/documents/<int:document_id>/delete", methods=["GET", "POST"])
def delete(document_id: int) -> ResponseReturnValue:
    require("kb_delete")  # before anything is read: no confirmation page for nothing
    found = call("kb_get", {"document_id": document_id})["documents"][0]
    if request.method == "GET" or request.form.get("confirmed") != "yes":
        return render_template("delete.html", title="Delete a document", doc=found)
    call("kb_delete", {"document_id": document_id})
    return render_template("deleted.html", title="Deleted", doc=found)
