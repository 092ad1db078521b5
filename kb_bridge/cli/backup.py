"""`kb-bridge backup DIR [--data DATA]`: a consistent copy of a local engine's SQLite store, taken while the
engine runs and writes (the README's "Backup and restore" says how to restore).

This module is the command: its options, output and exit codes. The copy is the engine's
(local_engine/backup.py: SQLite's online backup, with the files of jobs still queued), reached through the
engine's command-line module (cli/__init__.py's `engine_cli()`). A backup that fails or is interrupted
removes what it wrote into DIR, so that the same command runs again into it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from kb_bridge.cli import engine_cli
from kb_bridge.cli.exits import FAILED, OK, USAGE, Failed, add_command
from kb_bridge.cli.progress import Progress


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
    engine = engine_cli()
    try:
        source: Path = engine.backup_source(args.data)
    except engine.EngineError as exc:
        raise Failed(exc.message, USAGE) from None
    target: Path = args.dir
    if target.exists() and any(target.iterdir()):
        raise Failed(f"{target} is not empty; give a new or empty directory", USAGE)
    # A copy of every note: private to this user when the directory is made here (an existing one keeps the mode
    # its owner gave it; what is written into it is private in any case, local_engine/backup.py).
    target.mkdir(parents=True, exist_ok=True, mode=0o700)
    with Progress() as progress:
        try:
            summary: dict[str, Any] = engine.back_up(source, target, progress)
        except engine.EngineError as exc:
            raise Failed(exc.message, FAILED) from exc
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"Backed up {summary['documents']} document(s), {summary['chunks']} chunk(s) and "
              f"{summary['queued_files']} queued file(s) to {target} ({summary['bytes'] / 1e6:.1f} MB).")
    return OK
