"""Staging of uploaded files under the data directory, streamed: never the whole file in memory.

Werkzeug writes each multipart file part into the stream we give it. Ours is a temporary file in
`uploads/tmp/` that hashes and counts the bytes as they pass, so accepting a 500 MB upload costs one pass
over the bytes and constant memory. Accepting it hard-links the temporary file to a permanent name under
`uploads/`, where it stays until its job is done; the temporary name disappears when the request closes
the file, also when the request fails halfway.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

logger = logging.getLogger(__name__)


class HashingFile:
    """A writable, readable temporary file that keeps the sha256 and size of what was written."""

    def __init__(self, directory: Path) -> None:
        self._file: IO[bytes] = tempfile.NamedTemporaryFile(dir=directory, prefix="part-", delete=True)
        self._hash = hashlib.sha256()
        self.size = 0

    @property
    def name(self) -> str:
        return self._file.name

    def write(self, data: bytes) -> int:
        self._hash.update(data)
        self.size += len(data)
        return self._file.write(data)

    def sha256(self) -> str:
        return self._hash.hexdigest()

    def __getattr__(self, attribute: str) -> Any:
        # read, readline, seek, tell, flush, close...: the file's own.
        return getattr(self._file, attribute)


@dataclasses.dataclass(frozen=True)
class StagedFile:
    path: Path
    sha256: str
    size: int


class Staging:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.tmp_directory = directory / "tmp"

    def prepare(self) -> None:
        self.tmp_directory.mkdir(parents=True, exist_ok=True)

    def new_file(self) -> HashingFile:
        return HashingFile(self.tmp_directory)

    def keep(self, part: HashingFile, suffix: str) -> StagedFile:
        """Give the finished temporary file a permanent name (hard link; a copy where links fail)."""
        part.flush()
        path = self.directory / f"{uuid.uuid4().hex}{suffix}"
        try:
            os.link(part.name, path)
        except OSError:
            part.seek(0)
            with open(path, "wb") as target:
                shutil.copyfileobj(part, target, 1024 * 1024)
        return StagedFile(path=path, sha256=part.sha256(), size=part.size)

    def remove(self, path: str | Path | None) -> None:
        if path:
            Path(path).unlink(missing_ok=True)

    def sweep(self, in_use: Iterable[str]) -> int:
        """Delete staged files no job refers to, and stray temporary files (from a killed process)."""
        keep = {Path(p).name for p in in_use}
        removed = 0
        for directory in (self.directory, self.tmp_directory):
            for path in directory.iterdir():
                if path.is_file() and path.name not in keep:
                    path.unlink(missing_ok=True)
                    removed += 1
        if removed:
            logger.info("removed %d staged upload file(s) that no job needed", removed)
        return removed
