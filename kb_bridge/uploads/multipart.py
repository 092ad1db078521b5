"""The multipart/form-data body of a file upload to the engine, streamed, with a known length.

requests sends a file-like object with `__len__` as a streamed body with Content-Length (no
chunked encoding, which some engines cannot read), reading it block by block: the file is
never held in memory. A fresh body is built for each attempt, so a retry starts from byte 0.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from urllib.parse import quote

ProgressFn = Callable[[int], None]


class SizeChanged(ValueError):
    """The file part held more or fewer bytes than announced: the file grew or shrank while it was sent."""


def _ascii_fallback(filename: str) -> str:
    safe = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in filename)
    return safe or "upload"


def _disposition(name: str, filename: str | None = None) -> str:
    header = f'Content-Disposition: form-data; name="{name}"'
    if filename is not None:
        header += f'; filename="{_ascii_fallback(filename)}"'
        if _ascii_fallback(filename) != filename:
            # RFC 7578/5987: the exact UTF-8 name for servers that read filename*.
            header += f"; filename*=UTF-8''{quote(filename, safe='')}"
    return header


class MultipartBody:
    """Readable body: text fields first, then one file part streamed from `chunks()`."""

    def __init__(
        self,
        fields: Sequence[tuple[str, str]],
        filename: str,
        size: int,
        chunks: Callable[[], Iterable[bytes]],
        content_type: str = "application/octet-stream",
        progress: ProgressFn | None = None,
    ) -> None:
        self.boundary = "kb-bridge-" + secrets.token_hex(16)
        self._head = self._encode_head(fields, filename, content_type)
        self._tail = f"\r\n--{self.boundary}--\r\n".encode()
        self._size = size
        self._chunks = chunks
        self._progress = progress
        self._pieces: Iterator[bytes] | None = None
        self._current = memoryview(b"")
        self._pos = 0
        self._file_bytes = 0

    @property
    def content_type(self) -> str:
        return f"multipart/form-data; boundary={self.boundary}"

    def __len__(self) -> int:
        return len(self._head) + self._size + len(self._tail)

    def _encode_head(self, fields: Sequence[tuple[str, str]], filename: str, content_type: str) -> bytes:
        parts = []
        for name, value in fields:
            parts.append(f"--{self.boundary}\r\n{_disposition(name)}\r\n\r\n{value}\r\n")
        parts.append(f"--{self.boundary}\r\n{_disposition('file', filename)}\r\nContent-Type: {content_type}\r\n\r\n")
        return "".join(parts).encode("utf-8")

    def _iter_pieces(self) -> Iterator[bytes]:
        yield self._head
        for chunk in self._chunks():
            self._file_bytes += len(chunk)
            if self._file_bytes > self._size:
                raise SizeChanged("the staged file is longer than announced")
            yield chunk
            if self._progress is not None:
                self._progress(self._file_bytes)
        if self._file_bytes != self._size:
            raise SizeChanged("the staged file is shorter than announced")
        yield self._tail

    def read(self, n: int = -1) -> bytes:
        if self._pieces is None:
            self._pieces = self._iter_pieces()
        out: list[memoryview] = []
        want = n if n >= 0 else len(self)
        while want > 0:
            if self._pos >= len(self._current):
                piece = next(self._pieces, None)
                if piece is None:
                    break
                # A view, so handing out a few KiB at a time never copies the whole piece.
                self._current, self._pos = memoryview(piece), 0
                continue
            taken = self._current[self._pos : self._pos + want]
            self._pos += len(taken)
            want -= len(taken)
            out.append(taken)
        return b"".join(out)


def file_job_body(
    filename: str,
    size: int,
    chunks: Callable[[], Iterable[bytes]],
    fields: Sequence[tuple[str, str]],
    progress: ProgressFn | None = None,
) -> Callable[[], MultipartBody]:
    """What EngineClient.upload_file_job sends: a fresh body per attempt (a retry starts from byte 0)."""
    return lambda: MultipartBody(fields, filename, size, chunks, progress=progress)
