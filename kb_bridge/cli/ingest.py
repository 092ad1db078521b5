"""`kb-bridge ingest PATH...`: keep files and folders in sync with the knowledge base through the engine's API.

Each supported file (KB_UPLOAD_EXTENSIONS) is uploaded as a bulk job with its file name as title and a
`source_path` that no other root of the run can give (ingest_files.py: a single folder keeps its name as
prefix, `handbook/intro.md`; several get their path below a common folder; `--prefix` names them). A rerun
skips unchanged files, replaces changed ones, moves the documents of renamed or moved files in place (no
re-embedding), and with --prune deletes those whose file is gone (ingest_plan.py decides, ingest_run.py does
it); --dry-run prints that plan and changes nothing. A state file (ingest_state.py) lets a rerun over
unchanged files skip reading them and asking the engine about each one. --watch keeps doing this as files
change (ingest_watch.py).

Hidden files and folders (a name starting with '.') are left out unless named on the command line.
Symbolic links are followed only inside the paths given; the others are skipped and reported in the
summary (ingest_files.py says which and why).
Progress goes to stderr (progress.py: a bar on a terminal, a line every few seconds otherwise); the summary to
stdout, also after Ctrl-C or a lost engine. A file or folder that cannot be taken (unreadable, a name that is
not UTF-8: ingest_files.py) is reported as failed and the others go on. The exit code is 0 when every file was
added, updated, moved or skipped, 1 when any failed (a folder that could not be listed included) or had its job
cancelled (tasks/cancel, the console) while the run waited, 2 on a usage or configuration error, 130 after
Ctrl-C or SIGTERM (exits.py: the report of what was done is printed first); --watch ends with 0 on either, its
normal way to stop.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from kb_bridge import collection_tags
from kb_bridge.cli.configured import with_settings
from kb_bridge.cli.exits import FAILED, OK, USAGE, add_command
from kb_bridge.cli.ingest_files import Found, SkippedLink, find_files
from kb_bridge.cli.ingest_plan import Plan
from kb_bridge.cli.ingest_run import Outcome
from kb_bridge.cli.ingest_sync import synchronise
from kb_bridge.cli.progress import Progress
from kb_bridge.cli.targets import check_replaceable
from kb_bridge.client.engine import EngineClient
from kb_bridge.settings import Settings

STATUSES = ("added", "updated", "skipped", "failed", "moved", "removed", "cancelled")


def add_arguments(commands: Any) -> None:
    parser = add_command(
        commands, "ingest", with_settings(run_ingest), sigterm_stops=True,
        help="keep files and folders in sync with the knowledge base (adds, updates, moves, prunes; --watch)",
        description="Upload every supported file under PATH to the engine (KB_ENGINE_URL, KB_API_KEY) as a bulk "
                    "job, wait until each is indexed, and print what was added, updated, moved, removed, skipped "
                    "or failed. A rerun skips unchanged files without reading them (a state file remembers "
                    "them), moves the documents of renamed files in place, and continues an interrupted run. "
                    "Each PATH is stored under a source_path prefix of its own: a single folder's name "
                    "(~/handbook -> handbook/...), for several their path below the deepest folder holding "
                    "them all, or --prefix. Symbolic links are followed only when they point inside the paths "
                    "given; others are skipped and reported.",
        epilog="Exit status: 0 all files added, updated, moved or skipped; 1 a file failed (unreadable, a name "
               "that is not UTF-8, changed while uploaded) or its job was cancelled, a folder could not be "
               "listed, or the engine was unreachable; 2 a usage or configuration error (a missing PATH, two "
               "files with one source_path, a prefix holding another folder's documents); 130 interrupted "
               "(Ctrl-C or SIGTERM); --watch: 0 when stopped with Ctrl-C or SIGTERM. Example: kb-bridge ingest ~/notes "
               "--prune --watch")
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="files and folders to load")
    parser.add_argument("--collection", default=collection_tags.DEFAULT, metavar="NAME",
                        help=f"the collection to load into (default: {collection_tags.DEFAULT})")
    parser.add_argument("--tags", default="", metavar="T,...", help="comma-separated tags for every file")
    parser.add_argument("--glob", metavar="PATTERN",
                        help="only files whose path below the folder, or whose name, matches (e.g. '*.md', 'guides/*')")
    parser.add_argument("--prefix", action="append", default=[], metavar="NAME",
                        help="the source_path prefix of a PATH (e.g. docs/valgrind); give one per PATH, in order")
    parser.add_argument("--prune", action="store_true",
                        help="delete the documents of this PATH whose file is gone (never another PATH's)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would be added, updated, moved and removed; change nothing")
    parser.add_argument("--watch", action="store_true",
                        help="keep running: reflect created, changed, renamed (and with --prune deleted) files "
                             "within about 2 s, one line per change; Ctrl-C stops")
    parser.add_argument("--state", type=Path, metavar="FILE",
                        help="the state file that lets a rerun skip unchanged files (default: one per engine, "
                             "collection and PATHs under the user's state directory, e.g. ~/.local/state/kb-bridge/ingest/)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def run_ingest(args: argparse.Namespace, settings: Settings) -> int:
    tags = [tag.strip() for tag in args.tags.split(",") if tag.strip()]
    collection_tags.check_name(args.collection, "--collection")
    collection_tags.check_user_tags(tags, "--tags")
    args.tags = tags
    if args.state is not None:
        check_replaceable(args.state, "--state")  # also: a FIFO there would block the run's first read
    if args.watch:
        if args.dry_run:
            from kb_bridge.errors import InvalidArgument

            raise InvalidArgument("--dry-run", "cannot be combined with --watch")
        from kb_bridge.cli.ingest_watch import watch

        return watch(args, settings)
    found = find_files(args.paths, args.glob, settings.uploads.extensions, args.prefix)
    if not found.candidates and not found.problems and not args.prune:
        print(f"kb-bridge ingest: no supported files found (types: {', '.join(settings.uploads.extensions)})",
              file=sys.stderr)
        for link in found.links:
            print(f"  skipped link: {link.path}: {link.reason}", file=sys.stderr)
        return FAILED if found.unsupported or found.links else USAGE
    client = EngineClient(settings.engine)
    outcomes: list[Outcome] = []
    plan: Plan | None = None
    try:
        result = synchronise(client, args, found, Progress(), outcomes.append)
        plan = result.plan
    finally:  # what was done is reported also when Ctrl-C or a lost engine stopped the run (exits.py says which)
        client.close()
        report = _report(args, outcomes, found, plan)
    return FAILED if report["failed"] or report["cancelled"] else OK  # either way, not everything is stored


# --- the report ----------------------------------------------------------------------------------------------


def summary(outcomes: Sequence[Outcome], ignored: Sequence[str], interrupted: int,
            links: Sequence[SkippedLink] = (), plan: Plan | None = None, dry_run: bool = False) -> dict[str, Any]:
    counts = {status: sum(1 for o in outcomes if o.status == status) for status in STATUSES}
    report: dict[str, Any] = {
        **counts,
        "failures": [{"source_path": o.source_path, "reason": o.reason} for o in outcomes if o.status == "failed"],
        "cancellations": [o.source_path for o in outcomes if o.status == "cancelled"],
        "moves": [{"from": o.moved_from, "to": o.source_path} for o in outcomes if o.status == "moved"],
        "stale": [step.source_path for step in plan.of("stale")] if plan is not None else [],
        "unsupported": list(ignored),
        "links_skipped": [{"path": link.path, "reason": link.reason} for link in links],
        "interrupted": interrupted,
    }
    if dry_run and plan is not None:
        report["dry_run"] = True
        report["plan"] = {
            "add": [step.source_path for step in plan.of("add")],
            "update": [step.source_path for step in plan.of("update")],
            "move": [{"from": step.document.source_path, "to": step.source_path}
                     for step in plan.of("move") if step.document is not None],
            "remove": [step.source_path for step in plan.of("remove")],
            "skip": len(plan.of("skip")),
        }
        report["failed"] = len(plan.of("fail"))
        report["failures"] = [{"source_path": s.source_path, "reason": s.reason} for s in plan.of("fail")]
    return report


def print_summary(report: dict[str, Any], stream: TextIO) -> None:
    planned = report.get("plan")
    if planned is not None:
        for verb in ("add", "update", "remove"):
            for source_path in planned[verb]:
                print(f"would {verb}: {source_path}", file=stream)
        for move in planned["move"]:
            print(f"would move: {move['from']} -> {move['to']}", file=stream)
        print(f"dry run: would add {len(planned['add'])}, update {len(planned['update'])}, move "
              f"{len(planned['move'])}, remove {len(planned['remove'])}; {planned['skip']} unchanged; "
              "nothing was changed", file=stream)
    else:
        print(f"added {report['added']}, updated {report['updated']}, skipped {report['skipped']} (unchanged), "
              f"failed {report['failed']}, moved {report['moved']}, removed {report['removed']}"
              + (f", cancelled {report['cancelled']}" if report["cancelled"] else ""), file=stream)
    for failure in report["failures"]:
        print(f"  failed: {failure['source_path']}: {failure['reason']}", file=stream)
    for source_path in report["cancellations"]:
        print(f"  cancelled: {source_path}: its job was cancelled; run again to load it", file=stream)
    if report["stale"]:
        print(f"  {len(report['stale'])} document(s) whose file is gone are kept (--prune removes them)", file=stream)
    if report["unsupported"]:
        print(f"  {len(report['unsupported'])} file(s) of unsupported types left out (KB_UPLOAD_EXTENSIONS)",
              file=stream)
    for link in report["links_skipped"]:
        print(f"  skipped link: {link['path']}: {link['reason']}", file=stream)
    if report["interrupted"]:
        print(f"interrupted: {report['interrupted']} file(s) not finished (uploaded ones stay queued in the "
              "engine); run the same command again to continue", file=stream)


def _report(args: argparse.Namespace, outcomes: Sequence[Outcome], found: Found, plan: Plan | None) -> dict[str, Any]:
    finished = {outcome.source_path for outcome in outcomes}
    interrupted = 0 if args.dry_run and plan is not None else \
        sum(1 for candidate in found.candidates if candidate.source_path not in finished)
    report = summary(outcomes, found.unsupported, interrupted, found.links, plan, args.dry_run)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_summary(report, sys.stdout)
    return report
