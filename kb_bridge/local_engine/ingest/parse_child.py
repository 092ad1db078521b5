"""The process that reads uploaded files into text, for ingest/file_reader.py (which starts it).

Run as `python -m kb_bridge.local_engine.ingest.parse_child MEMORY_BYTES`. Its address space is capped at
MEMORY_BYTES (RLIMIT_AS, set before anything else is imported) where the system allows it, so a file whose
parser would take gigabytes raises MemoryError here instead of growing the engine. It reads one request per
line on stdin, {"path": ..., "doc_type": ...}, and answers each on stdout with a header (status, length)
and that many bytes: the UTF-8 text, or the message of a refusal. After a MemoryError it answers and exits,
so that the next file gets a fresh process.
"""

from __future__ import annotations

import json
import logging
import resource
import signal
import struct
import sys
from pathlib import Path

OK, REFUSED, OUT_OF_MEMORY = 0, 1, 2
HEADER = struct.Struct("<BQ")
# Text may hold lone surrogates (what some PDFs' text decodes to): carried through as the parser gave them.
ENCODING_ERRORS = "surrogatepass"


def main(argv: list[str]) -> int:
    limit = int(argv[1])
    if limit > 0:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):
            pass  # a system that does not enforce it (macOS): the time limit still applies
    # Ctrl-C in a terminal reaches the whole process group; the engine stops this process itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Parsers log what they skip (pypdf: damaged objects); the engine reports a file by its job, and lines
    # written here would bypass its log format.
    logging.disable(logging.WARNING)
    from ..errors import IngestionError
    from .parsers import extract_text

    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            status, data = OK, extract_text(Path(request["path"]), request["doc_type"]).encode("utf-8", ENCODING_ERRORS)
        except IngestionError as exc:
            status, data = REFUSED, exc.message.encode("utf-8", ENCODING_ERRORS)
        except MemoryError:
            status, data = OUT_OF_MEMORY, b""
        out.write(HEADER.pack(status, len(data)))
        out.write(data)
        out.flush()
        if status == OUT_OF_MEMORY:
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
