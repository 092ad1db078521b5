"""Errors to exit codes, for every `kb-bridge` command, in one place.

A command returns its own outcome (0, or 1 when something it reports failed) and raises for the rest; `run`
prints one line on stderr, `kb-bridge COMMAND: what happened`, and exits with:

- 0 done; 1 failed: the engine (a KbError: its code and message), a file (OSError), the target;
- 2 a usage or configuration error: an argument refused (InvalidArgument), a KB_* setting (SettingsError);
- 130 interrupted (Ctrl-C; for the commands that do long work with something to tidy or report at the end,
  export, import and ingest, SIGTERM too: `sigterm_as_ctrl_c`, so that `timeout` or a service manager stopping
  one leaves no temporary file and gets its report).

A reader of stdout gone before the output ends (`kb-bridge list | head -1`) is 1 without a word: there is nobody
to tell, and the one who cut the output knows.

A command words its own failures with `Failed(message, code)`, and adds what the reader should know on any
error or Ctrl-C that leaves a block with `hint()` ("nothing was written to FILE").
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from types import FrameType
from typing import Any

from kb_bridge.errors import InvalidArgument, KbError, SettingsError

OK, FAILED, USAGE, INTERRUPTED = 0, 1, 2, 130


class Failed(Exception):
    """A failure the command words itself: `kb-bridge COMMAND: message`, exit status `code`."""

    def __init__(self, message: str, code: int = FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@contextmanager
def hint(text: str) -> Iterator[None]:
    """Add `; text` to the line `run` prints for an error or Ctrl-C that leaves the block."""
    try:
        yield
    except BaseException as exc:
        exc.add_note(text)
        raise


@contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """Within the block SIGTERM raises KeyboardInterrupt, as Ctrl-C does, so that the block's cleanup and
    reports run (by default SIGTERM ends the process at once: a `finally` never runs). Main thread only."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def add_command(commands: Any, name: str, func: Callable[[argparse.Namespace], int], *,
                sigterm_stops: bool = False, **options: Any) -> argparse.ArgumentParser:
    """A subcommand of `commands` (argparse's subparsers) that `run` runs as `func(args)`; with `sigterm_stops`,
    within `sigterm_as_ctrl_c`."""
    parser: argparse.ArgumentParser = commands.add_parser(name, **options)
    parser.set_defaults(func=func, prog=parser.prog, sigterm_stops=sigterm_stops)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the command argparse chose (`set_defaults(func=...)`) and give its exit status."""
    try:
        with sigterm_as_ctrl_c() if args.sigterm_stops else nullcontext():
            status = int(args.func(args))
        sys.stdout.flush()  # a reader gone shows here, not as "Exception ignored" at the interpreter's exit
        return status
    except BrokenPipeError:
        _quiet_stdout()
        return FAILED
    except KeyboardInterrupt as exc:
        return _say(args, "interrupted", exc, INTERRUPTED)
    except SettingsError as exc:
        print(f"kb-bridge: configuration error: {exc}", file=sys.stderr)
        return USAGE
    except InvalidArgument as exc:
        return _say(args, exc.message, exc, USAGE)
    except KbError as exc:
        return _say(args, f"{exc.code}: {exc.message}", exc, FAILED)
    except Failed as exc:
        return _say(args, exc.message, exc, exc.code)
    except OSError as exc:
        return _say(args, str(exc), exc, FAILED)


def _quiet_stdout() -> None:
    """stdout's reader is gone: what is still buffered goes nowhere, so the interpreter's exit has nothing to fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def _say(args: argparse.Namespace, message: str, exc: BaseException, code: int) -> int:
    notes = getattr(exc, "__notes__", [])
    print("; ".join([f"{args.prog}: {message}", *notes]), file=sys.stderr, flush=True)
    return code
