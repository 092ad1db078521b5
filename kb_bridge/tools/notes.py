"""kb_addnote and kb_update_note: writing agent memory and notes."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kb_bridge import collection_tags, shapes
from kb_bridge.credentials.scopes import READ
from kb_bridge.errors import Conflict, InvalidArgument, NotANote, NotFound
from kb_bridge.tools import arguments as a
from kb_bridge.tools import reach, render
from kb_bridge.tools.moves import move, retag, version_conflict
from kb_bridge.tools.similar import SIMILAR, similar_notes
from kb_bridge.tools.spec import Result, ToolContext, ToolSpec
from kb_bridge.tools.waiting import wait_for_job

@dataclass(frozen=True, kw_only=True)
class AddNoteArguments:
    text: str = a.field(a.NOTE_TEXT)
    tags: tuple[str, ...] = a.field(a.TAGS, default=())
    collection: str = a.field(a.COLLECTION, default=collection_tags.DEFAULT)
    title: str | None = a.field(a.TITLE, default=None)
    source_path: str | None = a.field(a.SOURCE_PATH, default=None)
    wait: bool = a.field(a.BOOLEAN, default=False, description="return once searchable, with its document_id")
    allow_duplicate: bool = a.field(a.BOOLEAN, default=False)


ADDNOTE_OUTPUT = shapes.result(
    {
        "job_id": shapes.INT,
        "status": shapes.STR,
        "document_id": shapes.OPT_INT,
        "collection": shapes.STR,
        "tags": shapes.TAGS,
        "duplicate_of": shapes.OPT_INT,
        "similar": SIMILAR,
    }
)



@dataclass(frozen=True, kw_only=True)
class UpdateNoteArguments:
    document_id: int = a.field(a.DOCUMENT_ID)
    text: str | None = a.field(a.NOTE_TEXT, default=None)
    title: str | None = a.field(a.TITLE, default=None)
    collection: str | None = a.field(a.COLLECTION, default=None)
    tags: tuple[str, ...] | None = a.field(a.TAGS, default=None, description="replaces the note's own tags")
    expected_version: int | None = a.field(a.VERSION, default=None)


def addnote(ctx: ToolContext, args: AddNoteArguments) -> Result:
    collection = args.collection
    reach.require_writable(ctx.principal, collection)
    user_tags = collection_tags.check_user_tags(args.tags)
    body: dict[str, Any] = {"text": args.text, "tags": collection_tags.tags_with_collection(collection, user_tags),
                            "changed_by": ctx.principal.name}
    if not args.allow_duplicate and ctx.principal.can(READ):
        # The engine refuses, atomically, a second note with the same normalised text in the collection. Its
        # answer names the note that has it, so a caller that may not read is never checked against what is
        # there: `duplicate_of` would confirm any text it guessed (and give its id).
        body["unique_in"] = collection_tags.tag_for(collection)
    for key in ("title", "source_path"):
        value = getattr(args, key)
        if value is not None:
            body[key] = value
    # One key per tool call: the client's retries of this call can never make two notes.
    raw = ctx.engine.create_note_job(body, idempotency_key=str(uuid.uuid4()))
    job = shapes.job(raw)
    duplicate = "duplicate_of" in raw  # only an engine's duplicate answer has it (docs/engine-api.md)
    if args.wait or (duplicate and job["document_id"] is None):
        job = wait_for_job(ctx, job, ctx.settings.mcp.wait_seconds)
    return {
        "job_id": job["id"],
        "status": job["status"],
        "document_id": job["document_id"],
        "collection": collection,
        "tags": _held_tags(ctx, job["document_id"]) if duplicate else user_tags,
        "duplicate_of": job["document_id"] if duplicate else None,
        # Near matches are other notes' titles and text: reading, which kb:write alone does not grant.
        "similar": [] if duplicate or not ctx.principal.can(READ) else similar_notes(ctx, args.text, collection, job["document_id"]),
    }


def _held_tags(ctx: ToolContext, document_id: int | None) -> list[str]:
    """The tags of the note that already has a duplicate's text: this call's tags were not added to it, so the
    answer must not say it carries them (an agent would take them as set). None while its job has not stored
    it, or once it is gone."""
    if document_id is None:
        return []
    try:
        return list(shapes.document(reach.visible_document(ctx.engine, ctx.principal, document_id))["tags"])
    except NotFound:
        return []


def update_note(ctx: ToolContext, args: UpdateNoteArguments) -> Result:
    """A limited token's update without `expected_version` is retried from a fresh read when another change lands
    between its read and its writes (reach.retried_on_change). An attempt that conflicted wrote nothing at that
    step; an earlier step it made is written again with the same values."""
    if not ctx.principal.limited or args.expected_version is not None:
        return _update_note(ctx, args)
    return reach.retried_on_change(lambda: _update_note(ctx, args))


def _update_note(ctx: ToolContext, args: UpdateNoteArguments) -> Result:
    document_id = args.document_id
    expected = args.expected_version
    changes: dict[str, Any] = {key: getattr(args, key) for key in ("text", "title") if getattr(args, key) is not None}
    new_collection = args.collection
    tags = collection_tags.check_user_tags(args.tags) if args.tags is not None else None
    if not changes and new_collection is None and tags is None:
        raise InvalidArgument("text", "give at least one of text, title, tags or collection to change")
    if new_collection is not None:
        reach.require_writable(ctx.principal, new_collection)
    # A limited token reads the note first (elsewhere: NOT_FOUND, as if missing); a move alone reuses that read.
    seen = reach.visible_document(ctx.engine, ctx.principal, document_id) if ctx.principal.limited else None
    if seen is not None and expected is None:
        # Each write below is then conditional on the version found in the token's reach (the engine's If-Match):
        # a note another caller moves out of it meanwhile (a move raises the version) is a CONFLICT, never
        # written where this token may not write.
        expected = shapes.document(seen)["version"]
    if changes:
        document = _patch(ctx, document_id, {**changes, "changed_by": ctx.principal.name}, expected)
        # The version check was done by the engine, atomically; a limited token's next step holds to this one.
        expected = document["version"] if seen is not None else None
    else:
        document = shapes.document(seen if seen is not None else ctx.engine.get_document(document_id))
        if document["doc_type"] not in (None, "note"):
            raise NotANote()
    if expected is not None and document["version"] != expected:
        raise version_conflict(document["version"])
    if tags is not None:
        document = retag(ctx, document_id, tags, expected)
        expected = document["version"] if seen is not None else None  # checked by the engine's If-Match
    if new_collection is not None and document["collection"] != new_collection:
        document = move(ctx, document_id, new_collection, expected)
    return document if ctx.principal.can(READ) else _as_written(document, args)


def _as_written(document: Result, args: UpdateNoteArguments) -> Result:
    """An update's answer to a token that may write but not read (kb:write without kb:read): the note's id, its
    new version and time, and what the call itself set; never a title, tags or collection it did not write
    (a move to where a note already is changes nothing, and would otherwise read any note by its id)."""
    written = {"id", "version", "updated_at", *(key for key in ("title", "tags", "collection") if getattr(args, key) is not None)}
    return {key: value for key, value in document.items() if key in written}


def _patch(ctx: ToolContext, document_id: int, changes: dict[str, Any], expected: int | None) -> Result:
    try:
        return shapes.document(ctx.engine.patch_note(document_id, changes, if_match=expected))
    except Conflict as exc:
        if exc.details.get("reason") != "version_mismatch":
            raise
        raw = ctx.engine.get_document(document_id)
        current = shapes.document(raw, full=True)
        if expected is not None and _landed(current, changes, expected):
            # The PATCH is retried when its answer is lost (the engine restarting after it wrote): the retry then
            # finds the version the first attempt made. That is this call's own update, not another's change.
            return shapes.document(raw)
        raise version_conflict(current["version"]) from None
    except NotFound:
        ctx.engine.require_note_updates()  # on an engine too old for PATCH /notes, 404 means "no such endpoint"
        raise


def _landed(current: Result, changes: dict[str, Any], expected: int) -> bool:
    """Whether the note stands exactly as this update would have left it, one version after the one expected:
    the same text and title, changed by the same caller (an engine that names no `changed_by` never matches)."""
    fields = {"text": "content", "title": "title", "changed_by": "changed_by"}
    return current["version"] == expected + 1 and all(current.get(fields[key]) == value for key, value in changes.items())


def render_addnote(result: Result) -> str:
    tags = ", ".join(result["tags"]) or "-"
    where = f"in collection {result['collection']}, tags: {tags}"
    if result["duplicate_of"] is not None:
        return (f"Not added: document #{result['duplicate_of']} {where} already has this text; this call's "
                "title and tags were not applied. Change it with kb_update_note, or pass allow_duplicate.")
    if result["status"] == "done":
        text = f"Note saved and indexed as document #{result['document_id']} {where}."
    else:
        text = (f"Note queued as job {result['job_id']} ({result['status']}) {where}."
                " It becomes searchable when the job is done (kb_jobs).")
    if result["similar"]:
        lines = [f"- #{s['document_id']} {render.title(s['title'])} (score {s['score']}): {s['snippet']}"
                 for s in result["similar"]]
        text += "\nSimilar notes (to change one instead, use kb_update_note):\n" + "\n".join(lines)
    return text


def render_document(result: Result) -> str:
    return "Updated:\n" + render.document_line(result)


TOOLS = [
    ToolSpec(
        name="kb_addnote",
        description=(
            "Save a text note (a fact, a preference, a summary): collection memory for agent memory, documents "
            "for the user's. Returns a job id; searchable once indexed. A text already in the collection is not "
            "added again (duplicate_of); similar lists near matches. Update a stale note with kb_update_note "
            "instead of adding one."
        ),
        arguments=AddNoteArguments,
        output_schema=ADDNOTE_OUTPUT,
        handler=addnote,
        render=render_addnote,
        read_only=False,
    ),
    ToolSpec(
        name="kb_update_note",
        description=(
            "Replace a note's text, title or tags in place (same document_id, re-indexed) or move it to another "
            "collection; notes only, not uploaded files. expected_version (from kb_get): refuse with CONFLICT "
            "if the note changed since."
        ),
        arguments=UpdateNoteArguments,
        output_schema=shapes.result(shapes.DOCUMENT_FIELDS),
        handler=update_note,
        render=render_document,
        read_only=False,
        idempotent=True,
    ),
]
