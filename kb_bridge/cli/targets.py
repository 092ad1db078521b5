"""Files a command writes beside their path and then renames into place (export's FILE.jsonl, ingest's state
file): the rename replaces whatever the path names. A FIFO, a device or a link to one (`/dev/stdout`, which
root may replace) would be replaced instead of written to, and a folder would fail only after the work."""

from __future__ import annotations

from pathlib import Path

from kb_bridge.errors import InvalidArgument


def check_replaceable(path: Path, field: str) -> None:
    """InvalidArgument naming `field` unless `path` is a regular file (a link to one included) or absent."""
    if path.exists() and not path.is_file():
        raise InvalidArgument(field, f"{path} is not a regular file (a new file is written in its place: name a file)")
