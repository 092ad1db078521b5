"""What the engine's offline work (migration.py, backup.py) reports its progress to.

The caller's display, passed in: `kb-bridge migrate` and `kb-bridge backup` give the bridge's one progress
display (cli/progress.py), which has these methods; the engine only states the phases and how far they are.
"""

from __future__ import annotations

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
