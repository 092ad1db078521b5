"""What a `kb-bridge ingest` run will do, decided before anything is written (and all that --dry-run does).

From the files found (ingest_files.py) and the documents their roots loaded before (from the engine, or from
the state file: ingest_state.py), each file is:

- skipped: a document of its root holds its content (SHA-256) under its source_path;
- updated: documents of its root are under its source_path with other content (the new version is uploaded;
  they are deleted once it is indexed);
- moved: its content is in a document of its root whose file is gone (renamed, moved, or stored under the
  root's former prefix): that document gets the new source_path and title in place, nothing re-embedded;
- added: anything else.

A document of a root whose file is gone (and that no file moved into) is removed with --prune, else kept and
counted as stale. Gone means the file's path, checked folder by folder (ingest_paths.py), is missing: a file
that cannot be checked (permissions, a share gone away) is not gone, and nothing at or below a file or folder
the walk could not read (ingest_files.Problem, each a failed step) is, in that run. Documents another root loaded are never touched: finding one under a prefix of this run
stops the run before anything is written (ForeignDocuments). A document without any root tag, stored by an
older kb-bridge, belongs to the root whose prefix holds it, and gets that root's tag.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from kb_bridge.cli import ingest_paths
from kb_bridge.cli.exits import USAGE, Failed
from kb_bridge.cli.ingest_files import ROOT_TAG, Candidate, Problem, Root, unreadable
from kb_bridge.cli.ingest_state import Known
from kb_bridge.cli.listing import Listing
from kb_bridge.client.engine import EngineClient

PAGE = 500
CHANGED = "the file changed while it was read (still being written?); the next run takes it"


class ForeignDocuments(Failed):
    """A prefix of this run holds documents that another root loaded."""

    def __init__(self, message: str) -> None:
        super().__init__(message, USAGE)


@dataclasses.dataclass(frozen=True)
class Stored:
    """A document a root of this run loaded: id, source_path, content hash, and its root's tag (None: an older
    kb-bridge stored it without one)."""

    id: int
    source_path: str
    sha256: str | None
    root_tag: str | None


@dataclasses.dataclass(frozen=True)
class Step:
    """One thing to do for one file (or one gone document, for removals)."""

    action: str  # add | update | move | skip | remove | stale | fail
    source_path: str
    candidate: Candidate | None = None
    sha256: str | None = None
    document: Stored | None = None  # skip: the document kept; move: the one moved; remove/stale: the gone one
    replaces: tuple[int, ...] = ()  # documents deleted once this step is done (older versions)
    reason: str | None = None


@dataclasses.dataclass
class Plan:
    steps: list[Step] = dataclasses.field(default_factory=list)

    def of(self, *actions: str) -> list[Step]:
        return [step for step in self.steps if step.action in actions]


# --- what the roots loaded before ------------------------------------------------------------------------------


def stored_by_engine(client: EngineClient, collection_tag: str, roots: Sequence[Root]) -> list[Stored]:
    """The collection's documents that the roots loaded (by tag, or by prefix without any root tag), read in
    pages; ForeignDocuments when a prefix holds another root's."""
    tags = {root.tag for root in roots}
    found: list[Stored] = []
    # By key, not offset (cli/listing.py): an agent deleting a note while the plan is read would otherwise make
    # it miss a stored file, which the run would then upload again.
    for documents, _total in Listing(client, collection_tag, PAGE).pages():
        for document in documents:
            stored = _stored(document, tags, roots)
            if stored is not None:
                found.append(stored)
    return found


def _stored(document: dict[str, Any], tags: set[str], roots: Sequence[Root]) -> Stored | None:
    source_path = str(document.get("source_path") or "")
    root_tags = [tag for tag in document.get("tags") or [] if str(tag).startswith(ROOT_TAG)]
    under = [root for root in roots if root.file_for(source_path) is not None]
    owner = next((tag for tag in root_tags if tag in tags), None)
    if owner is None and root_tags and under:
        raise ForeignDocuments(
            f"{source_path} is already stored from another folder in this collection; nothing was written "
            f"(give this PATH a prefix of its own with --prefix NAME, or load it into another --collection)")
    if owner is None and not under:
        return None
    sha256 = document.get("sha256")
    return Stored(int(document["id"]), source_path, str(sha256) if sha256 else None, owner)


def stored_by_state(files: dict[str, Known]) -> list[Stored]:
    return [Stored(known.document_id, source_path, known.sha256, known.root_tag) for source_path, known in files.items()]


# --- the plan -------------------------------------------------------------------------------------------------


def make_plan(candidates: Sequence[Candidate], roots: Sequence[Root], stored: Iterable[Stored],
              known: dict[str, Known], prune: bool, sha256_of: Callable[[Candidate], str],
              problems: Sequence[Problem] = ()) -> Plan:
    """Decide every step (hashing only the files `known` cannot vouch for); each of the walk's `problems` is a
    failed step, and keeps what lies at or below it."""
    plan = Plan([Step("fail", problem.source_path, reason=problem.reason) for problem in problems])
    unreadable = [problem.path for problem in problems]
    at: dict[str, list[Stored]] = {}
    for document in stored:
        at.setdefault(document.source_path, []).append(document)
    new: list[tuple[Candidate, str]] = []
    for candidate in candidates:
        sha256, problem = _content(candidate, known.get(candidate.source_path), sha256_of)
        if sha256 is None:
            plan.steps.append(Step("fail", candidate.source_path, candidate, reason=problem))
            continue
        here = at.get(candidate.source_path, [])
        same = [document for document in here if document.sha256 == sha256]
        others = tuple(document.id for document in here if document.sha256 != sha256)
        if same:
            plan.steps.append(Step("skip", candidate.source_path, candidate, sha256, same[0], others))
        elif others:
            plan.steps.append(Step("update", candidate.source_path, candidate, sha256, replaces=others))
        else:
            new.append((candidate, sha256))
    taken = {candidate.source_path for candidate in candidates}
    gone = [document for source_path, documents in at.items() if source_path not in taken
            for document in documents if _is_gone(document, roots, unreadable)]
    for candidate, sha256 in new:
        match = next((document for document in gone if document.sha256 == sha256
                      and _owner(document, roots) == candidate.root), None)
        if match is not None:
            gone.remove(match)
            plan.steps.append(Step("move", candidate.source_path, candidate, sha256, match))
        else:
            plan.steps.append(Step("add", candidate.source_path, candidate, sha256))
    for document in sorted(gone, key=lambda document: document.source_path):
        plan.steps.append(Step("remove" if prune else "stale", document.source_path, document=document))
    return plan


def _content(candidate: Candidate, known: Known | None,
             sha256_of: Callable[[Candidate], str]) -> tuple[str | None, str]:
    """The file's SHA-256, from the state when its stat is unchanged, else read; (None, why) if unreadable."""
    if known is not None and known.matches(candidate):
        return known.sha256, ""
    try:
        sha256 = sha256_of(candidate)
        after = ingest_paths.lstat(candidate.root.path, candidate.path)
    except OSError as exc:
        return None, unreadable(exc)
    if (after.st_size, after.st_mtime_ns) != (candidate.size, candidate.mtime_ns):
        return None, CHANGED
    return sha256, ""


def _owner(document: Stored, roots: Sequence[Root]) -> Root | None:
    if document.root_tag is not None:
        return next((root for root in roots if root.tag == document.root_tag), None)
    holding = [root for root in roots if root.file_for(document.source_path) is not None]
    return max(holding, key=lambda root: len(root.prefix), default=None)


def _is_gone(document: Stored, roots: Sequence[Root], unreadable: Sequence[Path]) -> bool:
    """Whether the document's file no longer exists where its root's prefix puts it (certainly: a path that
    cannot be checked, or lies at or below one the walk could not read, is not gone)."""
    root = _owner(document, roots)
    if root is None:
        return False
    path = root.file_for(document.source_path)
    if path is None:
        return True
    if any(path == where or where in path.parents for where in unreadable):
        return False
    try:
        ingest_paths.lstat(root.path, path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:  # EACCES, EIO, a folder on the way now a link (ELOOP): unknown, so kept
        return False
    return False
