"""Notes: what a note's title is when none was given."""

from __future__ import annotations

import re

TITLE_CHARS = 80
# Control characters (C0 and DEL, the ones a title given to the bridge may not hold: tools/arguments.py): a tab,
# an escape sequence's ESC in a first line went into the derived title, which an agent then could not send back
# as a title, and which a client printing it passed to a terminal. Each run becomes one space.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def derive_title(text: str) -> str:
    """A note's default title: its first non-empty line, without Markdown heading marks, shortened."""
    for line in text.splitlines():
        line = _CONTROL.sub(" ", line).strip().lstrip("#").strip()
        if line:
            return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"
    return "note"
