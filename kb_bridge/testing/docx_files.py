"""DOCX files for the tests of the engine's DOCX reader: rewritten parts, and hostile archives."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping
from pathlib import Path

MiB = 1024 * 1024


def rewrite_zip(data: bytes, parts: Mapping[str, bytes | None]) -> bytes:
    """The archive with these parts replaced or added (bytes) or removed (None); the others as they were."""
    source = zipfile.ZipFile(io.BytesIO(data))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            if info.filename not in parts:
                target.writestr(info.filename, source.read(info))
        for name, content in parts.items():
            if content is not None:
                target.writestr(name, content)
    return buffer.getvalue()


def part(data: bytes, name: str) -> bytes:
    """One part of an archive, decompressed."""
    return zipfile.ZipFile(io.BytesIO(data)).read(name)


def write_zip_bomb(path: Path, member: str, size: int) -> Path:
    """A zip holding `member`, `size` bytes of one repeated byte: a small file that decompresses to a large one.
    Written a MiB at a time, so the test never holds `size` bytes."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", b'<?xml version="1.0"?><Types/>')
        with archive.open(member, "w") as stream:
            left = size
            while left > 0:
                stream.write(b" " * min(left, MiB))
                left -= MiB
    return path


def declare_size(data: bytes, member: str, size: int) -> bytes:
    """The archive with `member`'s uncompressed size in the central directory (what zipfile reads) set to
    `size`, whatever the member really holds."""
    archive = zipfile.ZipFile(io.BytesIO(data))
    patched = bytearray(data)
    at = archive.start_dir
    for _ in archive.infolist():
        name_length, extra_length, comment_length = (int.from_bytes(patched[at + n:at + n + 2], "little")
                                                     for n in (28, 30, 32))
        if patched[at + 46:at + 46 + name_length] == member.encode():
            patched[at + 24:at + 28] = size.to_bytes(4, "little")
        at += 46 + name_length + extra_length + comment_length
    return bytes(patched)
