"""`kb-bridge backup DIR [--data DATA]`: a consistent copy of a local engine's SQLite store, taken while the
engine runs and writes.

SQLite's online backup API copies the database page by page and restarts the copy of any page a writer
changes meanwhile, so the result is the database as of one moment, committed transactions in the WAL
included. The staged files of jobs still queued at that moment are copied beside it, so they run after a
restore. The search indexes are not copied: they are derived, and the engine rebuilds them from the
database at its first start on the copy (the README's "Backup and restore" says how to restore).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from kb_bridge.cli.exits import OK, USAGE, Failed, add_command
from kb_bridge.cli.progress import Progress

DATABASE = "engine.sqlite3"
UPLOADS = "uploads"
PAGES_PER_STEP = 1024


def add_arguments(commands: Any) -> None:
    backup = add_command(
        commands, "backup", run_backup, help="copy a running local engine's store to DIR (consistent; the engine keeps serving)",
        description="Copy the local engine's SQLite database (its WAL included) as of one moment, and the files "
                    "of jobs still queued, into DIR, while the engine keeps serving reads and writes.",
        epilog="The data directory is --data, else KB_ENGINE_DATA, else the engine's default. "
               "Exit status: 0 copied and checked; 1 the copy failed; 2 usage error.")
    backup.add_argument("dir", metavar="DIR", type=Path, help="where to put the copy (created; must be empty if it exists)")
    backup.add_argument("--data", metavar="DATA", type=Path, help="the engine's data directory")
    backup.add_argument("--json", action="store_true", help="print the summary as JSON")


def run_backup(args: argparse.Namespace) -> int:
    from kb_bridge.local_engine.config import resolve_data_dir  # the engine's own rule for its directory

    data = resolve_data_dir(os.environ, args.data)
    source = data / DATABASE
    target: Path = args.dir
    if not source.is_file():
        raise Failed(f"no local engine database at {source} (set --data or KB_ENGINE_DATA; an engine on "
                     "PostgreSQL is backed up with pg_dump)", USAGE)
    if target.exists() and any(target.iterdir()):
        raise Failed(f"{target} is not empty; give a new or empty directory", USAGE)
    target.mkdir(parents=True, exist_ok=True)
    try:
        summary = copy_store(source, target)
    except (sqlite3.Error, OSError) as exc:
        raise Failed(f"the copy failed: {exc}") from exc
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"Backed up {summary['documents']} document(s), {summary['chunks']} chunk(s) and "
              f"{summary['queued_files']} queued file(s) to {target} ({summary['bytes'] / 1e6:.1f} MB).")
    return OK


def copy_store(source: Path, target: Path) -> dict[str, Any]:
    """The online backup into target/engine.sqlite3, then the staged files its queued jobs need."""
    copy = target / DATABASE
    temporary = target / (DATABASE + ".part")
    with sqlite3.connect(source) as live, sqlite3.connect(temporary) as out:
        live.execute("PRAGMA busy_timeout = 10000")
        pages = live.execute("PRAGMA page_count").fetchone()[0]
        with Progress().phase("backup", pages, "page") as progress:
            def step(_status: int, remaining: int, total: int) -> None:
                progress.advance_to(total - remaining, total)

            live.backup(out, pages=PAGES_PER_STEP, progress=step)
    out_check = sqlite3.connect(temporary)
    try:
        problem = out_check.execute("PRAGMA quick_check").fetchone()[0]
        if problem != "ok":
            raise sqlite3.DatabaseError(f"the copy does not pass quick_check: {problem}")
        documents = out_check.execute("SELECT COUNT(*) FROM documents").fetchone()[0]
        chunks = out_check.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        staged = [row[0] for row in out_check.execute(
            "SELECT staged_path FROM jobs WHERE status IN ('queued', 'running') AND staged_path IS NOT NULL")]
        # A restored copy is a different database from the indexes on any disk: they are rebuilt.
        out_check.execute("UPDATE meta SET value = lower(hex(randomblob(16))) WHERE key = 'index_epoch'")
        out_check.commit()
    finally:
        out_check.close()
    os.replace(temporary, copy)
    copied = 0
    for name in staged:
        path = source.parent / UPLOADS / name
        if path.is_file():
            (target / UPLOADS).mkdir(exist_ok=True)
            shutil.copy2(path, target / UPLOADS / name)
            copied += 1
    return {"database": str(copy), "documents": documents, "chunks": chunks, "queued_files": copied,
            "bytes": copy.stat().st_size}
