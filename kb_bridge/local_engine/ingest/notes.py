"""Notes: what a note's title is when none was given."""

from __future__ import annotations

TITLE_CHARS = 80


def derive_title(text: str) -> str:
    """A note's default title: its first non-empty line, without Markdown heading marks, shortened."""
    for line in text.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"
    return "note"
