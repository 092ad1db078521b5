"""What the engine's offline work (migration.py, backup.py, reembed.py) reports its progress to.

The caller's display, passed in: `kb-bridge migrate` and `kb-bridge backup` give the bridge's one progress
display (cli/progress.py), which has these methods; the engine only states the phases and how far they are.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol


class Progress(Protocol):
    def phase(self, name: str, total: int | None, unit: str) -> object:
        """Start a phase of `total` (None: not known) `unit`s, ending the one before."""

    def advance(self, amount: int, note: str = "") -> None: ...

    def advance_to(self, done: int, total: int | None = None) -> None: ...

    def say(self, message: str) -> None:
        """A line of its own, beside the phase's display."""

    def close(self) -> None:
        """End the phase."""


# What makes a display for one command (cli/progress.py's Progress class is one).
ProgressDisplay = Callable[[], AbstractContextManager[Progress]]


class PlainLines:
    """Progress as plain lines on stderr: phases, notes, and every tenth of a known total."""

    def __init__(self) -> None:
        self._total: int | None = None
        self._done = 0
        self._shown = 0

    def __enter__(self) -> PlainLines:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def phase(self, name: str, total: int | None, unit: str) -> PlainLines:
        self.close()
        self._total, self._done, self._shown = total, 0, 0
        self.say(f"{name}: {total if total is not None else '?'} {unit}")
        return self

    def advance(self, amount: int, note: str = "") -> None:
        self.advance_to(self._done + amount)

    def advance_to(self, done: int, total: int | None = None) -> None:
        self._done, self._total = done, total if total is not None else self._total
        if self._total and (self._done - self._shown) * 10 >= self._total:
            self._shown = self._done
            self.say(f"  {self._done} of {self._total}")

    def say(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._total is not None and self._shown != self._done:
            self.say(f"  {self._done} of {self._total}")
            self._shown = self._done


def plain_lines() -> PlainLines:
    return PlainLines()
