"""The staged files a backup (backup.py) needs: those of the jobs still queued or running in its copy of the
database, taken from the engine's `uploads/` while the engine runs.

The engine deletes a job's staged file as soon as the job is done (ingest/worker.py), so a file looked for
only after the database was copied may be gone although the copy still lists its job as queued: the
restored engine would fail that job ("the uploaded file is missing"). So every staged file is taken before
the database is copied (`take_all`: a hard link, which costs nothing and keeps the bytes whatever the engine
does with its name; a copy where links fail), and `take_needed` then takes what was staged during the copy
and checks each needed file against the size its job recorded. A needed file gone by then (its job was
accepted and finished while the backup ran) fails the backup rather than leaving the job without it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sqlite3
from pathlib import Path

from .errors import EngineError


@dataclasses.dataclass(frozen=True)
class Needed:
    """A job of the copy that still needs its staged file."""

    job_id: int
    name: str  # the file's name in uploads/
    size: int | None  # as the engine recorded it when it accepted the upload


def take_all(uploads: Path, into: Path) -> set[str]:
    """Take every file staged in `uploads` now into `into` (created); the names taken."""
    taken: set[str] = set()
    if not uploads.is_dir():
        return taken
    # 0700: a staged file is taken by a hard link, which keeps the engine's mode for it (0644 when an older
    # engine staged it under a umask of 0022); only the directory keeps other users from the uploaded bytes.
    into.mkdir(exist_ok=True, mode=0o700)
    for entry in os.scandir(uploads):
        if entry.is_file(follow_symlinks=False) and _take(Path(entry.path), into / entry.name):
            taken.add(entry.name)
    return taken


def needed_by(copy: sqlite3.Connection) -> list[Needed]:
    """The staged files the copy's unfinished jobs need (a running job is queued again when it starts)."""
    found = []
    for job_id, name, payload in copy.execute(
            "SELECT id, staged_path, payload FROM jobs WHERE status IN ('queued', 'running') AND staged_path IS NOT NULL"):
        try:
            size = json.loads(payload or "{}").get("size")
        except (ValueError, AttributeError):
            size = None
        found.append(Needed(int(job_id), Path(str(name)).name, size if isinstance(size, int) else None))
    return found


def take_needed(uploads: Path, into: Path, taken: set[str], needed: list[Needed]) -> int:
    """Make `into` hold exactly the files `needed`, whole: take those staged since `take_all`, drop the others
    it took. EngineError naming the job whose file is gone. Returns how many files are kept."""
    into.mkdir(exist_ok=True, mode=0o700)
    for item in needed:
        kept = into / item.name
        if item.name not in taken or not _whole(kept, item.size):
            # Staged while the database was copied, or copied while it was being written: take it (again).
            if not _take(uploads / item.name, kept) or not _whole(kept, item.size):
                raise EngineError(f"job {item.job_id}'s uploaded file ({item.name}) was deleted before the backup "
                                  "could take it (the job finished while the backup ran): run the backup again into an "
                                  "empty directory")
    wanted = {item.name for item in needed}
    for name in taken - wanted:
        (into / name).unlink(missing_ok=True)
    if not wanted:
        into.rmdir()
    return len(wanted)


def _take(path: Path, to: Path) -> bool:
    """Hard-link (else copy) `path` to `to`; False when `path` is gone."""
    to.unlink(missing_ok=True)
    try:
        os.link(path, to)
        return True
    except FileNotFoundError:
        return False
    except OSError:
        pass  # another file system, or one without hard links
    try:
        shutil.copy2(path, to)
    except FileNotFoundError:
        to.unlink(missing_ok=True)
        return False
    return True


def _whole(path: Path, size: int | None) -> bool:
    try:
        return size is None or path.stat().st_size == size
    except FileNotFoundError:
        return False
