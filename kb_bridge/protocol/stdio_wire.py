"""The stdio wire: the process's stdin and stdout as two private file descriptors, read and written without
Python's buffered file objects.

While the bridge serves, fd 0 reads /dev/null and fd 1 writes to stderr: a stray print, a library's output or a
child process can never put anything but JSON-RPC on the client's stdout. The reads and writes are plain
os.read/os.write on the private descriptors, which are never closed: the stdin reader is a daemon thread that
may still be blocked in a read when the process exits, and an unbuffered descriptor holds no lock that the
interpreter's shutdown would wait for.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

CHUNK = 64 * 1024


@dataclass(frozen=True)
class Wire:
    stdin: int
    stdout: int


@contextmanager
def claimed() -> Iterator[Wire]:
    """The wire on private duplicates of fds 0 and 1, with 0 and 1 pointed elsewhere until the block ends."""
    wire = Wire(stdin=os.dup(0), stdout=os.dup(1))
    nothing = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(nothing, 0)
    finally:
        os.close(nothing)
    os.dup2(2, 1)
    try:
        yield wire
    finally:
        os.dup2(wire.stdout, 1)
        os.dup2(wire.stdin, 0)


def lines(fd: int, max_bytes: int) -> Iterator[bytes | None]:
    """The lines read from `fd` (without their newline) until it ends; a last line without one too, so a
    message cut off by the end of input is answered (a parse error) rather than lost. A line longer than
    `max_bytes` is dropped as it is read and stands as None: memory holds at most one line of that size."""
    pending = bytearray()
    dropping = False
    while chunk := os.read(fd, CHUNK):
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if not dropping:
                pending += chunk[start:] if end < 0 else chunk[start:end]
                if len(pending) > max_bytes:
                    pending.clear()
                    dropping = True
            if end < 0:
                break
            yield None if dropping else bytes(pending)
            pending.clear()
            dropping = False
            start = end + 1
    if dropping:
        yield None
    elif pending:
        yield bytes(pending)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
