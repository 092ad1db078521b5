"""Progress of a long command (ingest, import, export, backup, migrate), on stderr: a tqdm bar on a terminal,
plain lines otherwise (one when a phase starts, one every few seconds, one when it ends), so that a log or a
script reading the output sees the same numbers without a bar's control characters.

A plain line reads `PHASE: DONE/TOTAL UNIT, RATE UNIT/s, ETA N s; NOTE` (bytes in MiB); tests and users read it.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any, TextIO

LINE_SECONDS = 5.0
MiB = 1024 * 1024


class Progress:
    """One phase at a time: `phase()` starts one (ending the one before), `advance()` moves it, `close()` ends
    it. A context manager: leaving it ends the phase, also on an error or Ctrl-C."""

    def __init__(self, stream: TextIO | None = None, bar: bool | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._bar_enabled = self._stream.isatty() if bar is None else bar
        self._bar: Any = None
        self._phase = ""
        self._unit = ""
        self._total: int | None = None
        self.done = 0
        self._last_line = 0.0
        self._started = time.monotonic()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def phase(self, name: str, total: int | None, unit: str) -> Progress:
        """Start a phase of `total` (None: not known) `unit`s; "B" counts bytes."""
        self.close()
        self._phase, self.done, self._total, self._unit = name, 0, total, unit
        self._started = time.monotonic()
        if self._bar_enabled:
            from tqdm import tqdm  # only a terminal draws a bar

            scale = unit == "B"
            self._bar = tqdm(total=total, desc=name, unit=unit, unit_scale=scale, unit_divisor=1024 if scale else 1000,
                             file=self._stream, dynamic_ncols=True, mininterval=0.5)
        else:
            self._line(force=True)
        return self

    def advance(self, amount: int, note: str = "") -> None:
        self.done += amount
        if self._bar is not None:
            self._bar.update(amount)
            if note:
                self._bar.set_postfix_str(note, refresh=False)
        else:
            self._line(note=note)

    def advance_to(self, done: int, total: int | None = None) -> None:
        """Move to `done` of `total` (a total that grew while the work ran)."""
        if total is not None and total != self._total:
            self._total = total
            if self._bar is not None:
                self._bar.total = total
        self.advance(done - self.done)

    def say(self, message: str) -> None:
        """A line of its own on the stream, below the bar rather than on it."""
        if self._bar is not None:
            self._bar.write(message, file=self._stream)
        else:
            print(message, file=self._stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._phase:
            self._line(force=True)
        self._phase = ""

    def _line(self, note: str = "", force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_line < LINE_SECONDS:
            return
        self._last_line = now
        rate = self.done / max(now - self._started, 1e-6)
        total = self._total
        eta = f", ETA {int((total - self.done) / rate)} s" if total is not None and 0 < rate and self.done < total else ""
        if self._unit == "B":
            amount = _mib(self.done) + ("" if total is None else f"/{_mib(total)}") + " MiB"
            speed = f"{_mib(int(rate))} MiB/s"
        else:
            amount = f"{self.done}" + ("" if total is None else f"/{total}") + f" {self._unit}"
            speed = f"{rate:.1f} {self._unit}/s"
        print(f"{self._phase}: {amount}, {speed}{eta}{'; ' + note if note else ''}", file=self._stream, flush=True)


def _mib(value: int) -> str:
    return f"{value / MiB:.1f}"
