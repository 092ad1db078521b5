"""The engine's part of `kb-bridge backup` (cli/backup.py): a consistent copy of a local engine's SQLite store,
taken while the engine runs and writes.

SQLite's online backup API copies the database page by page and restarts the copy of any page a writer
changes meanwhile, so the result is the database as of one moment, committed transactions in the WAL
included. The staged files of jobs still queued at that moment are kept beside it (backup_files.py: taken
before the copy, so that a job finishing meanwhile cannot take its file away), so they run after a restore.
The search indexes are not copied: they are derived, and the engine rebuilds them from the database at its
first start on the copy (the README's "Backup and restore" says how to restore).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import backup_files
from .config import DATABASE_FILE, UPLOADS_DIR, resolve_data_dir
from .errors import ConfigError, EngineError
from .progress import Progress

PAGES_PER_STEP = 1024


def database_in(env: Mapping[str, str], data: Path | None) -> Path:
    """The store to copy: the SQLite database in `data` (--data), else KB_ENGINE_DATA, else the engine's
    default directory; ConfigError when there is none."""
    source = resolve_data_dir(env, data) / DATABASE_FILE
    if not source.is_file():
        raise ConfigError(f"no local engine database at {source} (set --data or KB_ENGINE_DATA; an engine on "
                          "PostgreSQL is backed up with pg_dump)")
    return source


def back_up(source: Path, target: Path, progress: Progress) -> dict[str, Any]:
    """Copy the database `source` and its queued jobs' files into the directory `target` (empty): the summary
    `kb-bridge backup --json` prints. EngineError when the copy fails. A backup that fails or is interrupted
    removes what it wrote, so that the same command can be run again into the same directory."""
    try:
        return _copy_store(source, target, progress)
    except (sqlite3.Error, OSError) as exc:
        _remove_partial(target)
        raise EngineError(f"the copy failed: {exc}") from exc
    except BaseException:
        _remove_partial(target)
        raise


def _copy_store(source: Path, target: Path, progress: Progress) -> dict[str, Any]:
    """The staged files, the online backup into target/engine.sqlite3, then the staged files its queued jobs
    need, checked (backup_files.py says why in that order)."""
    copy = target / DATABASE_FILE
    temporary = target / (DATABASE_FILE + ".part")
    uploads, kept_uploads = source.parent / UPLOADS_DIR, target / UPLOADS_DIR
    taken = backup_files.take_all(uploads, kept_uploads)
    # Made 0600 before SQLite opens it, which would create it under the umask (0644 under 0022: every note
    # readable by other users); SQLite gives its journal the database file's mode. A new file (O_EXCL), never
    # through a link put in its place since the directory was found empty.
    os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    with sqlite3.connect(source) as live, sqlite3.connect(temporary) as out:
        live.execute("PRAGMA busy_timeout = 10000")
        pages = live.execute("PRAGMA page_count").fetchone()[0]
        progress.phase("backup", pages, "page")
        try:
            def step(_status: int, remaining: int, total: int) -> None:
                progress.advance_to(total - remaining, total)

            live.backup(out, pages=PAGES_PER_STEP, progress=step)
        finally:
            progress.close()
    out_check = sqlite3.connect(temporary)
    try:
        # The files first, before the engine finishes more of the jobs: quick_check is slow on a large copy.
        queued_files = backup_files.take_needed(uploads, kept_uploads, taken, backup_files.needed_by(out_check))
        problem = out_check.execute("PRAGMA quick_check").fetchone()[0]
        if problem != "ok":
            raise sqlite3.DatabaseError(f"the copy does not pass quick_check: {problem}")
        documents = out_check.execute("SELECT COUNT(*) FROM documents").fetchone()[0]
        chunks = out_check.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        # A restored copy is a different database from the indexes on any disk: they are rebuilt.
        out_check.execute("UPDATE meta SET value = lower(hex(randomblob(16))) WHERE key = 'index_epoch'")
        out_check.commit()
    finally:
        out_check.close()
    os.replace(temporary, copy)
    return {"database": str(copy), "documents": documents, "chunks": chunks, "queued_files": queued_files,
            "bytes": copy.stat().st_size}


def _remove_partial(target: Path) -> None:
    """Remove what a failed backup wrote into `target` (cli/backup.py gave it empty): the database, its
    temporary name and SQLite's files beside it, and the staged files taken."""
    for name in (DATABASE_FILE, DATABASE_FILE + ".part"):
        for suffix in ("", "-journal", "-wal", "-shm"):
            (target / (name + suffix)).unlink(missing_ok=True)
    shutil.rmtree(target / UPLOADS_DIR, ignore_errors=True)
