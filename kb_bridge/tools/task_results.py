"""A task's result when it is too large for its id (tools/task_ids.py MAX_ID_CHARS): a small reference the
bridge reads the result again from, in the engine.

Each reference keeps only values of bounded size (ids, numbers, a collection name, a digest), so that every
task id fits the bound; what can be long (a title, tags, file names, near-duplicate hints) is read again:
- kb_update_note: the note's id and version, and which fields the call answered (a token that may write but not
  read is answered only the fields it set: tools/notes.py `_as_written`). Read again, it is the note at that
  version (`GET /documents/{id}?version=N`, reach.visible_version), NOT_FOUND once the engine keeps it no longer.
- kb_addnote: the job, the collection, and whether the call found near-duplicate notes. Read again once the job
  is done: the tags the engine's job files the note under, and the hints searched again from the note's text.
- kb_upload_finish: the job, the size and the sha256; the file name is the one the engine's job names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kb_bridge import shapes
from kb_bridge.credentials.scopes import READ
from kb_bridge.errors import KbError, NotFound
from kb_bridge.tools import reach
from kb_bridge.tools.similar import similar_notes
from kb_bridge.tools.spec import Result, ToolContext

_ALL_FIELDS = frozenset(shapes.DOCUMENT_FIELDS)


def reference(tool: str, result: Result) -> Result:
    """The bounded reference of a tool's result."""
    if tool == "kb_update_note":
        fields = None if set(result) == _ALL_FIELDS else sorted(set(result) & _ALL_FIELDS)
        return {"id": result["id"], "version": result.get("version"), "fields": fields}
    if tool == "kb_addnote":
        return {"job_id": result["job_id"], "collection": result["collection"],
                "duplicate_of": result.get("duplicate_of"), "hinted": bool(result.get("similar"))}
    return {"job_id": result["job_id"], "size_bytes": result["size_bytes"], "sha256": result["sha256"]}


def restore(ctx: ToolContext, tool: str, ref: Result, job: dict[str, Any] | None) -> Result:
    """The result a reference stands for: kb_update_note's with no job, the others' once their job is done."""
    return _RESTORE[tool](ctx, ref, job or {})


def _note(ctx: ToolContext, ref: Result, _job: dict[str, Any]) -> Result:
    document_id, version = ref["id"], ref["version"]
    if isinstance(version, int):
        document = shapes.document(reach.visible_version(ctx.engine, ctx.principal, document_id, version))
        if document["version"] != version:  # an engine before 3.9 answers the current note, whatever ?version says
            raise NotFound(f"version {version} of document {document_id} not found")
    else:  # an engine that numbers no versions: the note as it stands
        document = shapes.document(reach.visible_document(ctx.engine, ctx.principal, document_id))
    fields = ref["fields"]
    return document if fields is None else {key: value for key, value in document.items() if key in fields}


def _addnote(ctx: ToolContext, ref: Result, job: dict[str, Any]) -> Result:
    document_id = job.get("document_id")
    return {"job_id": ref["job_id"], "status": job.get("status"), "document_id": document_id,
            "collection": ref["collection"], "tags": job.get("tags", []), "duplicate_of": ref["duplicate_of"],
            "similar": _hints(ctx, ref["collection"], document_id) if ref["hinted"] else []}


def _hints(ctx: ToolContext, collection: str, document_id: int | None) -> list[dict[str, Any]]:
    """The near-duplicate hints searched again from the note's text (as similar_notes, none when it fails). They
    are other notes' titles and text, so the caller must still read that collection now: a tokens-file entry
    keeps its tasks when its scopes or collections change (the restart reads them again), and the note may have
    moved since, where job_visible follows it."""
    if document_id is None or not ctx.principal.can(READ) or not ctx.principal.sees(collection):
        return []
    try:
        text = shapes.document(ctx.engine.get_document(document_id), full=True)["content"]
    except KbError:
        return []
    return similar_notes(ctx, text or "", collection, document_id)


def _upload(_ctx: ToolContext, ref: Result, job: dict[str, Any]) -> Result:
    return {"job_id": ref["job_id"], "status": job.get("status"), "filename": job.get("filename") or "",
            "size_bytes": ref["size_bytes"], "sha256": ref["sha256"]}


_RESTORE: dict[str, Callable[[ToolContext, Result, dict[str, Any]], Result]] = {
    "kb_update_note": _note, "kb_addnote": _addnote, "kb_upload_finish": _upload,
}
