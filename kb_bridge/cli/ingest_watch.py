"""`kb-bridge ingest --watch`: keep the roots in sync as files change, until Ctrl-C or SIGTERM (exit 0).

watchdog (inotify on Linux, FSEvents on macOS, polling elsewhere) reports changes below the roots. After a
change the watcher waits until nothing has changed for QUIET_SECONDS (a file being written keeps sending
events, so it is read once complete; a file that still changes while it is hashed is left for the next pass:
ingest_plan.py), then makes one pass exactly as a rerun would (ingest_sync.py: the state file keeps
the pass over unchanged files to a walk and a few requests), so creations, changes, renames and moves (and
deletions, with --prune) all take the same path. Each change is logged as one line on stdout.

When the engine is unreachable (restarting, say) the pass is retried after RETRY_SECONDS, doubling up to
RETRY_MAX_SECONDS, and catches up with everything that changed meanwhile once it answers.
"""

from __future__ import annotations

import argparse
import io
import sys
import threading
import time

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from kb_bridge.cli.exits import OK
from kb_bridge.cli.ingest_sync import synchronise
from kb_bridge.cli.ingest_files import find_files, resolve_roots, shown
from kb_bridge.cli.ingest_run import Outcome
from kb_bridge.cli.progress import Progress
from kb_bridge.client.engine import EngineClient
from kb_bridge.errors import EngineFailure
from kb_bridge.settings import Settings

QUIET_SECONDS = 0.3
RETRY_SECONDS = 0.5
RETRY_MAX_SECONDS = 5.0
# Reads (ours included, when hashing) are not changes.
_IGNORED = {"opened", "closed_no_write"}


class Changes(FileSystemEventHandler):
    """Remembers that something changed, and when last."""

    def __init__(self) -> None:
        self._changed = threading.Event()
        self._last = 0.0

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in _IGNORED:
            self._last = time.monotonic()
            self._changed.set()

    def settled(self, timeout: float | None) -> bool:
        """Wait (up to `timeout`; None: no limit) for a change, then until QUIET_SECONDS pass without one.
        True when there was a change."""
        if not self._changed.wait(timeout):
            return False
        while (left := self._last + QUIET_SECONDS - time.monotonic()) > 0:
            self._changed.clear()
            self._changed.wait(left)
        self._changed.clear()
        return True


def watch(args: argparse.Namespace, settings: Settings) -> int:
    roots = resolve_roots(args.paths, args.prefix)  # a missing PATH or a bad --prefix stops here (exit 2)
    changes = Changes()
    observer = Observer()
    for root in roots:
        folder = root.path if root.path.is_dir() else root.path.parent
        observer.schedule(changes, str(folder), recursive=root.path.is_dir())
    client = EngineClient(settings.engine)
    observer.start()
    _say(f"watching {', '.join(f'{shown(str(root.path))} as {shown(root.prefix)}' for root in roots)}; Ctrl-C stops")
    try:
        retry = RETRY_SECONDS
        pending = True
        while True:
            if pending:
                try:
                    _pass(client, args, settings)
                    pending, retry = False, RETRY_SECONDS
                except EngineFailure as exc:
                    _say(f"engine: {exc.message}; trying again in {retry:g} s")
            if changes.settled(retry if pending else None):
                pending = True
            elif pending:
                retry = min(retry * 2, RETRY_MAX_SECONDS)
    except KeyboardInterrupt:
        _say("stopped")
        return OK
    finally:
        observer.stop()
        observer.join(timeout=5)
        client.close()


def _pass(client: EngineClient, args: argparse.Namespace, settings: Settings) -> None:
    found = find_files(args.paths, args.glob, settings.uploads.extensions, args.prefix)
    quiet = Progress(io.StringIO(), bar=False)  # a line per change instead
    synchronise(client, args, found, quiet, _log)


def _log(outcome: Outcome) -> None:
    if outcome.status == "skipped":
        return
    if outcome.status == "moved":
        _say(f"moved {outcome.moved_from} -> {outcome.source_path}")
    elif outcome.status == "failed":
        _say(f"failed {outcome.source_path}: {outcome.reason}")
    else:
        _say(f"{outcome.status} {outcome.source_path}")


def _say(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", file=sys.stdout, flush=True)
