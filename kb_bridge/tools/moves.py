"""Moving a document to another collection: a document is in exactly one collection, always.

On an engine with `PATCH /api/v1/documents/{id}/tags` (3.1 and later) a move is one engine step: add the new
collection tag and remove the old ones at once, conditional on the version just read (If-Match). One move is
one version step, the other tags stay, and of concurrent moves each either lands on the version it read or
reads again and retries, so exactly one collection tag remains: the target of the last move that landed.

An engine without it (404 or 405 to the PATCH) gets the move in steps, in the order the kb v3 spec sets ("SHALL
first remove collection:documents via the engine's tag API, then add collection:memory"): remove the old
collection tags, then add the new one, under a lock that every bridge worker respects (`ToolContext.locks`, lent by the shared upload store)
(so the bridge's own moves of one document never interleave). Between the steps the document is in no
collection; a step that fails puts back what the move had done (the old collection returns, the new one goes),
so once the call returns the document is in exactly one collection. If even that fails, the outcome is
reported as unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kb_bridge import collection_tags, shapes
from kb_bridge.errors import Conflict, EngineFailure, EngineUnsupported, KbError, NotFound, OutcomeUnknown
from kb_bridge.tools.spec import Result, ToolContext

# Concurrent moves of one document retry on a version they did not expect; bounded.
ATTEMPTS = 8
LOCK_SECONDS = 10.0


def move(ctx: ToolContext, document_id: int, collection: str, expected_version: int | None) -> Result:
    """Move a document into `collection`. With `expected_version`, refuse (CONFLICT) if it changed since."""
    target = collection_tags.tag_for(collection)
    return _patch_tags(ctx, document_id, expected_version, lambda raw: _change(raw, target),
                       lambda add, remove: _move_in_steps(ctx, document_id, target, expected_version),
                       "it was being moved")


def retag(ctx: ToolContext, document_id: int, tags: list[str], expected_version: int | None) -> Result:
    """Give a document exactly these tags of its own (its collection tag stays): one engine step, conditional
    on the version just read, as a move is; with `expected_version`, refuse (CONFLICT) if it changed since."""

    def change(raw: dict[str, Any]) -> tuple[list[str], list[str]]:
        own = [tag for tag in shapes.document_tags(raw) if not collection_tags.is_collection_tag(tag)]
        return [tag for tag in tags if tag not in own], [tag for tag in own if tag not in tags]

    def in_steps(add: list[str], remove: list[str]) -> Result:
        # An engine before 3.1: the steps one by one (the collection tag is never touched).
        for tag in remove:
            ctx.engine.remove_tag(document_id, tag)
        if add:
            ctx.engine.add_tags(document_id, add)
        return shapes.document(ctx.engine.get_document(document_id))

    return _patch_tags(ctx, document_id, expected_version, change, in_steps, "its tags were being changed")


def _patch_tags(ctx: ToolContext, document_id: int, expected_version: int | None,
                change: Callable[[dict[str, Any]], tuple[list[str], list[str]]],
                in_steps: Callable[[list[str], list[str]], Result], doing: str) -> Result:
    """Read the document, work out (tags to add, tags to remove) with `change`, and send both in one engine
    step conditional on the version read; a change that landed first means read again (bounded), unless the
    caller expected a version. An engine without that step (before 3.1) gets `in_steps` instead."""
    for _ in range(ATTEMPTS):
        raw = ctx.engine.get_document(document_id)
        version = _version(raw, expected_version)
        add, remove = change(raw)
        if not add and not remove:
            return shapes.document(raw)
        try:
            ctx.engine.patch_tags(document_id, add, remove, if_match=version)
        except Conflict as exc:
            if exc.details.get("reason") != "version_mismatch":
                raise
            if expected_version is not None:
                again = ctx.engine.get_document(document_id)
                if shapes.document(again)["version"] == expected_version + 1 and change(again) == ([], []):
                    # The PATCH is retried when its answer is lost (the engine restarting after it wrote): the retry
                    # finds the version the first attempt made, with the tags it set. That is this call's own change.
                    return shapes.document(again)
                raise version_conflict(None) from None
            continue  # another change landed first: read again and change from there
        except (EngineUnsupported, NotFound) as exc:
            if isinstance(exc, NotFound):
                ctx.engine.get_document(document_id)  # the document still exists: the endpoint does not
            return in_steps(add, remove)
        return shapes.document(ctx.engine.get_document(document_id))
    raise Conflict(f"the document kept changing while {doing}; try again")


def _move_in_steps(ctx: ToolContext, document_id: int, target: str, expected_version: int | None) -> Result:
    """Remove the old collection tags, then add the new one (the spec's order), holding the document's move
    lock; a failed step is undone."""
    with ctx.locks.lock(f"move-{document_id}", LOCK_SECONDS):
        raw = ctx.engine.get_document(document_id)
        _version(raw, expected_version)
        add, remove = _change(raw, target)
        try:
            for tag in remove:
                ctx.engine.remove_tag(document_id, tag)
            if add:
                ctx.engine.add_tags(document_id, add)
        except OutcomeUnknown as exc:
            _undo(ctx, document_id, add, remove, exc)
            # Undone: whatever the engine did with the last step, the document is as it was.
            raise EngineFailure("the move failed midway and was undone; the document stays in its collection") from exc
        except KbError as exc:
            _undo(ctx, document_id, add, remove, exc)
            raise
        return shapes.document(ctx.engine.get_document(document_id))


def _undo(ctx: ToolContext, document_id: int, added: list[str], remove: list[str], cause: KbError) -> None:
    """Put the document back as it was before a move in steps failed midway (the old tags, not the new)."""
    try:
        current = set(shapes.document_tags(ctx.engine.get_document(document_id)))
        missing = [tag for tag in remove if tag not in current]
        if missing:
            ctx.engine.add_tags(document_id, missing)
        for tag in added:
            if tag in current:
                ctx.engine.remove_tag(document_id, tag)
    except KbError:
        raise OutcomeUnknown(
            "the move failed midway and could not be undone; check the document's collection with kb_get"
        ) from cause


def _version(raw: dict[str, Any], expected: int | None) -> int | None:
    version = shapes.document(raw)["version"]
    if expected is not None and version != expected:
        raise version_conflict(version)
    return version


def _change(raw: dict[str, Any], target: str) -> tuple[list[str], list[str]]:
    """(tags to add, tags to remove) to leave `target` as the only collection tag."""
    tags = shapes.document_tags(raw)
    remove = [tag for tag in collection_tags.collection_tags(tags) if tag != target]
    return ([] if target in tags else [target]), remove


def version_conflict(current: int | None) -> Conflict:
    now = f" (now version {current})" if current is not None else ""
    return Conflict(
        f"the note changed since the version you expected{now}; re-read it with kb_get and retry",
        current_version=current,
    )
