"""What `kb-bridge ingest` remembers between runs, so that a rerun over unchanged files reads none of them and
asks the engine about none of them.

One JSON file per (engine URL, collection, roots and their prefixes): by default
`<user state dir>/kb-bridge/ingest/<16 hex digits of the SHA-256 of those>.json` (platformdirs'
user_state_dir: `~/.local/state` on Linux, honouring XDG_STATE_HOME), or `--state FILE`. It holds, per file,
the (size, mtime in ns, inode) it had when its SHA-256 was taken, that SHA-256 and the id of its document;
and per root what the engine said about the root's documents at the end of the run (how many, and the
newest change: `GET /documents?tag=<collection>&tag=<root tag>&limit=1`, newest first).

A run trusts the file only when the engine still says the same about every root (one request per root):
anything else (a document deleted, moved, retagged or added by someone else, another engine behind the URL)
makes the run rebuild what it knows from the engine's listing and hash every file: correct, only slower.
A file whose (size, mtime, inode) changed is hashed again. The file is written (atomically: a temporary
file renamed over it) only after a run that finished, never by --dry-run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kb_bridge.cli.ingest_files import Candidate, Root

FORMAT = 1


@dataclasses.dataclass(frozen=True)
class Known:
    """A file as the last run left it: what stat said, its content's SHA-256, its document and root tag."""

    size: int
    mtime_ns: int
    inode: int
    sha256: str
    document_id: int
    root_tag: str

    def matches(self, candidate: Candidate) -> bool:
        return (self.size, self.mtime_ns, self.inode) == (candidate.size, candidate.mtime_ns, candidate.inode)


@dataclasses.dataclass
class State:
    files: dict[str, Known] = dataclasses.field(default_factory=dict)
    # root tag -> [document count, newest updated_at, its id] as the engine reported at the end of the run
    roots: dict[str, list[Any]] = dataclasses.field(default_factory=dict)


def default_path(engine_url: str, collection: str, roots: Sequence[Root]) -> Path:
    from platformdirs import user_state_dir  # only a run that keeps state needs it

    key = json.dumps([engine_url.rstrip("/"), collection, sorted([str(r.path), r.prefix] for r in roots)])
    name = hashlib.sha256(key.encode()).hexdigest()[:16] + ".json"
    return Path(user_state_dir("kb-bridge")) / "ingest" / name


def load(path: Path) -> State | None:
    """The state in `path`, or None when there is none or it cannot be read (then the run rebuilds it)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            return None
        files = {source_path: Known(*entry) for source_path, entry in data["files"].items()}
        return State(files, {tag: list(mark) for tag, mark in data["roots"].items()})
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def save(path: Path, state: State) -> None:
    data = {"format": FORMAT, "roots": state.roots,
            "files": {source_path: dataclasses.astuple(known) for source_path, known in sorted(state.files.items())}}
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".ingest-state-", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(data, stream, separators=(",", ":"))
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
