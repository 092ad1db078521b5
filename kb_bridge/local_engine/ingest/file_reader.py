"""Uploaded files read into text in a child process, with a time limit and a memory limit.

A parser can take far longer or far more memory than its file's size suggests: CPython 3.11's html.parser
is quadratic on "<a " repeated (60 KB took 38 s, CVE-2025-6069), pypdf re-reads a content stream that
every page shares (24 KB took 53 s), and no parser can be interrupted from another thread. In a process of
its own (ingest/parse_child.py) a parse can be stopped: at KB_ENGINE_PARSE_TIMEOUT it is killed and the job
fails saying so, its memory is capped at KB_ENGINE_PARSE_MEMORY (RLIMIT_AS) so that a file cannot grow the
engine, and a job cancelled while its file is read (DELETE /api/v1/jobs/{id}) or an engine stopping kills it
at once.

The process is started once and reads file after file (a start costs tens of milliseconds, a file sent to a
running one a fraction of one); it is started again after a kill or a crash.
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..errors import IngestionError
from . import parse_child

logger = logging.getLogger(__name__)

MiB = 1024 * 1024
_READ_BYTES = 1024 * 1024


class ReadAborted(Exception):
    """The read was stopped from outside: its job was cancelled, or the engine is stopping."""


class _Ended(Exception):
    """The child process ended (or its pipe closed) before answering."""


class _TimedOut(Exception):
    pass


class FileReader:
    """Reads files in one child process at a time: `read` from one thread, `abort` and `close` from any."""

    def __init__(self, timeout: float, memory_mib: int) -> None:
        self.timeout = timeout
        self.memory_mib = memory_mib
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._closed = False

    def read(self, path: Path, doc_type: str) -> str:
        """The file's text (parsers.extract_text, in the child); IngestionError when the file is refused or
        over a limit; ReadAborted when abort() or close() stopped it."""
        with self._lock:
            if self._closed:
                raise ReadAborted
            if self._process is None or self._process.poll() is not None:
                self._process = self._start()
            process = self._process
        deadline = time.monotonic() + self.timeout
        try:
            assert process.stdin is not None
            process.stdin.write(json.dumps({"path": str(path), "doc_type": doc_type}).encode() + b"\n")
            process.stdin.flush()
            status, size = parse_child.HEADER.unpack(self._receive(process, parse_child.HEADER.size, deadline))
            data = self._receive(process, size, deadline)
        except (_Ended, BrokenPipeError):
            code = self._discard(process)
            with self._lock:
                aborted = self._closed or self._process is not process  # abort() or close() took it away
            if aborted:
                raise ReadAborted from None
            logger.warning("the file reader process ended with status %s while reading %s", code, path.name)
            raise IngestionError(
                f"the file's reader stopped unexpectedly (exit status {code}); a file that needs more than the "
                f"memory limit of {self.memory_mib} MiB (KB_ENGINE_PARSE_MEMORY) can end it so") from None
        except _TimedOut:
            self._discard(process)
            raise IngestionError(f"reading the file took longer than the limit of {self.timeout:g} s "
                                 "(KB_ENGINE_PARSE_TIMEOUT); it was stopped") from None
        if status == parse_child.OK:
            return data.decode("utf-8", parse_child.ENCODING_ERRORS)
        if status == parse_child.OUT_OF_MEMORY:
            self._discard(process)  # it exits after answering: the next file gets a fresh one
            raise IngestionError(f"reading the file needed more memory than the limit of {self.memory_mib} MiB "
                                 "(KB_ENGINE_PARSE_MEMORY)")
        raise IngestionError(data.decode("utf-8", parse_child.ENCODING_ERRORS))

    def abort(self) -> None:
        """Stop the read in progress (its job was cancelled): read() raises ReadAborted."""
        with self._lock:
            process, self._process = self._process, None
        if process is not None:
            process.kill()

    def close(self) -> None:
        """Stop the child for good (the engine is stopping): a read in progress raises ReadAborted."""
        with self._lock:
            self._closed = True
        self.abort()

    def _start(self) -> subprocess.Popen[bytes]:
        # A fresh interpreter, not a fork: the engine's threads (model, store, requests) hold locks a forked
        # child would inherit held. The module is found as the engine's own package is.
        memory = self.memory_mib * MiB
        return subprocess.Popen(
            [sys.executable, "-m", parse_child.__name__, str(memory)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, close_fds=True)

    def _receive(self, process: subprocess.Popen[bytes], size: int, deadline: float) -> bytes:
        """Exactly `size` bytes of the child's answer, by the deadline."""
        assert process.stdout is not None
        descriptor = process.stdout.fileno()
        data = bytearray()
        while len(data) < size:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _TimedOut
            readable, _, _ = select.select([descriptor], [], [], left)
            if not readable:
                continue
            piece = os.read(descriptor, min(size - len(data), _READ_BYTES))
            if not piece:
                raise _Ended
            data += piece
        return bytes(data)

    def _discard(self, process: subprocess.Popen[bytes]) -> int | None:
        """Kill the process (when it still runs) and reap it; the next read starts another."""
        with self._lock:
            if self._process is process:
                self._process = None
        process.kill()
        try:
            return process.wait(5)
        except subprocess.TimeoutExpired:
            return None
        finally:
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    pipe.close()
