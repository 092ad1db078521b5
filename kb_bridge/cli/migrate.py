"""`kb-bridge migrate --from-sqlite DIR [--to postgresql://...]`: copy a local engine's SQLite store into
PostgreSQL, with the same document ids, versions, tags, chunks and vectors (nothing is re-embedded), and
each note's history (its earlier versions, changed_by, its duplicate keys; engine 3.9).

Resumable and idempotent: documents are copied in batches, each in one transaction, and a document the
target already holds (same id and content) is skipped, so running the command again after an interruption
(or twice) copies only what is missing. A different document under the same id in the target is named and
counted as skipped (exit status 1), never overwritten. At the end the counts of both stores are compared.

The source is not trusted: it is checked whole before anything is written to PostgreSQL, and a file that is
not a sound engine store is one line naming it. One document that PostgreSQL cannot hold (a NUL character an
older engine took) never stops the copy: it is named by id with the reason, skipped, and the rest is copied;
the exit status is then 1, so a script notices.

Jobs are not copied, only documents: a store whose engine stopped with jobs still queued (or running) is
refused, naming them, before PostgreSQL is touched (local_engine/migration.py's `refuse_unfinished`); the
engine finishes them when it starts on the store again.

Exit status: 0 when everything arrived; 1 when documents were skipped, the counts do not match, the store has
jobs not done yet, or the target failed; 2 for a usage error (a bad --to URL, a --from-sqlite that is not a sound store); 130 on Ctrl-C. Stop
the engine that writes to the SQLite store first, or documents it adds meanwhile may be missed (a rerun
copies them).

This module is the command: its options, output and exit codes. The copy is the engine's
(local_engine/migration.py), reached through the engine's command-line module (cli/__init__.py's
`engine_cli()`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from kb_bridge.cli import engine_cli
from kb_bridge.cli.exits import FAILED, OK, USAGE, Failed, add_command, hint
from kb_bridge.cli.progress import Progress

PROG = "kb-bridge migrate"


def add_arguments(commands: Any) -> None:
    parser = add_command(
        commands, "migrate", run_migrate,
        help="copy a local engine's SQLite store into PostgreSQL (ids, versions, vectors kept)",
        description="Copy documents, chunks, vectors (no re-embedding), tags, versions and notes' histories from a "
                    "local engine's SQLite data directory into a PostgreSQL database for KB_ENGINE_DATABASE_URL. Resumable and "
                    "idempotent: a rerun copies only what is missing. Counts are compared at the end.",
        epilog="Exit status: 0 copied and the counts match; 1 a document was skipped (named on stderr), counts "
               "differ, the store has jobs not done yet (let its engine finish them first) or the database "
               "failed; 2 usage error (a bad --to URL, a --from-sqlite that is not a sound "
               "engine store); 130 interrupted (run it again to continue).")
    parser.add_argument("--from-sqlite", required=True, metavar="DIR", type=Path,
                        help="the engine's data directory (the one holding engine.sqlite3)")
    parser.add_argument("--to", metavar="URL",
                        help="the PostgreSQL database (postgresql://user:password@host/db, with @ / : %% and spaces in "
                             "the password percent-encoded); default: KB_ENGINE_DATABASE_URL, which keeps the password "
                             "out of the command line, where every user of the machine can read it (ps)")
    parser.add_argument("--json", action="store_true", help="print the final counts as JSON")


def run_migrate(args: argparse.Namespace) -> int:
    engine = engine_cli()
    try:  # the whole source is checked before PostgreSQL is touched
        plan = engine.plan_migration(args.from_sqlite, args.to)
    except engine.EngineError as exc:
        raise Failed(exc.message, USAGE) from None
    with hint("run it again to continue"), Progress() as progress:
        def skipped(document_id: object, reason: str) -> None:
            progress.say(f"{PROG}: document {document_id} skipped: {reason}")

        try:
            report: dict[str, Any] = engine.run_migration(plan, progress, skipped)
        except engine.EngineError as exc:
            raise Failed(exc.message, FAILED) from exc
    _print_report(args, report)
    return OK if report["ok"] else FAILED


def _print_report(args: argparse.Namespace, report: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(report))
        return
    skipped = report["skipped"]
    print(f"copied {report['copied']} document(s) to {report['target']}"
          + (f"; skipped {len(skipped)} (named above): {', '.join(str(s['id']) for s in skipped)}" if skipped else ""))
    expected, found = report["expected"], report["found"]
    for key in ("documents", "chunks", "vectors", "tags", "versions"):
        mark = "ok" if found[key] >= expected[key] else "MISSING"
        print(f"  {key:<9} sqlite {expected[key]:>9}  postgresql {found[key]:>9}  {mark}")
