"""Writing and curating: a new note (kb_addnote), and a note's title, tags and collection (kb_update_note,
so a move follows the tool's rules: one engine step under If-Match, a limited token only into its own
collections, a note changed since the page loaded refused with nothing changed). Every refusal shows the
tool's reason on the form, the typed values kept."""

from __future__ import annotations

from typing import Any

from flask import redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from kb_bridge import collection_tags as collection_names
from kb_bridge.errors import KbError
from kb_bridge.web.console.choices import collection_choices, preselected
from kb_bridge.web.console.state import LOST_VERSION, blueprint, call, require, usable, whole_number

# Agents keep their memory there (kb_addnote's description): a person writing a note may want it too.
MEMORY = "memory"


def tag_list(text: str) -> list[str]:
    """Comma-separated tags as typed, blanks and repeats dropped, in order."""
    return list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))


@blueprint.get("/notes/new")
def new_note_page() -> ResponseReturnValue:
    require("kb_addnote")
    names = collection_choices(MEMORY)
    form = {"title": "", "tags": "", "text": "", "collection": preselected(names, request.args.get("collection")
                                                                         or collection_names.DEFAULT)}
    return render_template("note_new.html", title="New note", collections=names, form=form, error=None,
                           duplicate=None)


@blueprint.post("/notes/new")
def new_note() -> ResponseReturnValue:
    require("kb_addnote")
    form = {key: request.form.get(key, "") for key in ("title", "tags", "text", "collection")}
    arguments: dict[str, Any] = {"text": form["text"], "collection": form["collection"] or collection_names.DEFAULT,
                                 "tags": tag_list(form["tags"])}
    if form["title"].strip():
        arguments["title"] = form["title"].strip()
    try:
        added = call("kb_addnote", arguments)
    except KbError as exc:
        return _new_note_again(form, f"{exc.code}: {exc.message}", None, exc.http_status)
    if added["duplicate_of"] is not None:
        return _new_note_again(form, None, added["duplicate_of"], 409)
    if added["document_id"] is not None:
        return redirect(url_for("console.document", document_id=added["document_id"], saved="1"))
    if usable("kb_jobs"):
        return redirect(url_for("console.job", job_id=added["job_id"]))
    return render_template("uploaded.html", title="Note sent", can_follow=False,
                           jobs=[{"id": added["job_id"], "status": added["status"], "filename": form["title"] or "note"}])


def _new_note_again(form: dict[str, str], error: str | None, duplicate: int | None, status: int) -> ResponseReturnValue:
    names = collection_choices(MEMORY)
    return render_template("note_new.html", title="New note", collections=names, form=form, error=error,
                           duplicate=duplicate), status


@blueprint.post("/documents/<int:document_id>/details")
def save_details(document_id: int) -> ResponseReturnValue:
    """A note's title, tags and collection, in one kb_update_note call guarded by the version the page showed."""
    require("kb_update_note")
    version = whole_number(request.form.get("version", ""), LOST_VERSION)
    current = call("kb_get", {"document_id": document_id})["documents"][0]
    changes: dict[str, Any] = {}
    title = request.form.get("title", "").strip()
    if title and title != (current["title"] or ""):
        changes["title"] = title
    tags = tag_list(request.form.get("tags", ""))
    if tags != list(current["tags"]):
        changes["tags"] = tags
    collection = request.form.get("collection", "")
    if collection and collection != current["collection"]:
        changes["collection"] = collection
    if not changes:
        return redirect(url_for("console.document", document_id=document_id))
    try:
        call("kb_update_note", {"document_id": document_id, **changes, "expected_version": version})
    except KbError as exc:
        now = call("kb_get", {"document_id": document_id})["documents"][0]
        problem = f"{exc.code}: {exc.message}"
        if exc.code == "CONFLICT":
            problem = (f"This note changed since you loaded it (it is now version {now['version']}); nothing was "
                       "changed. Your values are kept below: check the note and save again.")
        details = {"title": title, "tags": request.form.get("tags", ""), "collection": collection}
        return render_template("document.html", title=now["title"] or f"Document {document_id}", doc=now,
                               text=now.get("content") or "", version=now["version"], conflict=None, saved=None,
                               details_error=problem, details=details, details_version=now["version"],
                               collections=collection_choices(MEMORY)), exc.http_status
    return redirect(url_for("console.document", document_id=document_id, saved="details"))
