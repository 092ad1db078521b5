"""Logging configuration, applied only where a process starts (CLI, gunicorn config).

One line of JSON per event on stderr (stdout belongs to the stdio transport): time, level,
logger, message, and the structured fields a call site passes as `extra={"fields": {...}}`
(event, tool, caller, duration_ms, outcome, code, ...). Call sites never pass note text or file
bytes. Formatting is on every request's path, so it is kept cheap: one dict, one dumps.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterable
from typing import Any

from kb_bridge import control_chars, request_id
from kb_bridge.redaction import MASK, NO_SECRETS, Redactor

FIELDS = "fields"
# The logger of the bridge's access lines (access_log.py), named here because its lines are redacted apart.
ACCESS_LOGGER = "kb_bridge.access"

# Secrets this process knows (set where logging is configured): no piece of one reaches a line. Lines are
# redacted whole, except the access line, whose only text from outside is the request path (it is on every
# request's path, so it is kept cheap): the path is redacted as a value, before the line is encoded. Looking
# for it in the encoded line instead missed every path the encoding changes (a newline, a quote, a character
# beyond ASCII becomes an escape), and the secret in such a path was written whole.
_redact: Redactor = NO_SECRETS

# Credentials the process cannot know by value, in a path a client pasted one into: a JWT (an OAuth access token:
# the bridge keeps only the issuer's keys) and a token as `kb-bridge token new` makes them (token_urlsafe(32): 43
# characters; the tokens file keeps only its digest). A run of 32 or more URL-safe characters mixing upper case,
# lower case and digits is taken for one; no path the bridge serves holds such a run (collection names are lower
# case, ids are digits), and a person reading the log needs none of it.
_TOKEN_SHAPED = re.compile(
    r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"
    r"|(?<![A-Za-z0-9_-])(?=[A-Za-z0-9_-]*[A-Z])(?=[A-Za-z0-9_-]*[a-z])(?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]{32,}"
)


def _cheap(record: logging.LogRecord) -> bool:
    """An access line, redacted field by field (its path) rather than whole."""
    return record.name == ACCESS_LOGGER and not record.exc_info


def _with_path_redacted(record: logging.LogRecord, fields: dict[str, Any]) -> dict[str, Any]:
    if not _cheap(record):
        return fields
    path = fields.get("path")
    if not isinstance(path, str):
        return fields
    clean = _TOKEN_SHAPED.sub(MASK, _redact(path))
    return fields if clean == path else {**fields, "path": clean}


def _redacted(record: logging.LogRecord, line: str) -> str:
    return line if not _redact or _cheap(record) else _redact(line)


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, FIELDS, None)
    return fields if isinstance(fields, dict) else {}


class JsonFormatter(logging.Formatter):
    _second = -1
    _stamp = ""

    def _timestamp(self, created: float, msecs: float) -> str:
        second = int(created)
        if second != self._second:  # strftime once per second, not per line
            self._second, self._stamp = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._stamp}.{int(msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self._timestamp(record.created, record.msecs),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process or os.getpid(),
            "msg": record.getMessage(),
        }
        rid = request_id.current.get()
        if rid is not None:
            entry["request_id"] = rid
        entry.update(_with_path_redacted(record, fields_of(record)))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return _redacted(record, _encode(entry))


# One encoder for every line: json.dumps with any option builds a new JSONEncoder per call.
_encode = json.JSONEncoder(default=str).encode


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        """The line before any traceback, on one line (a traceback follows on lines of its own, as it always has):
        a message can carry what a client sent (a User-Agent in the engine's access lines, a token's subject), and
        a newline there began a forged line. JSON lines escape control characters already."""
        return control_chars.escaped(super().formatMessage(record), keep="\t")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = _with_path_redacted(record, fields_of(record))
        return _redacted(record, f"{text} {json.dumps(fields, default=str)}" if fields else text)


def gunicorn_logconfig(level: str, as_json: bool, access_log: bool = False) -> dict[str, Any]:
    """gunicorn's own error log in the same format, on stderr. Its access log stays off unless asked for
    (the bridge writes its own access lines; the local engine may want gunicorn's)."""
    formatter = "kb_bridge.logs.JsonFormatter" if as_json else "kb_bridge.logs.TextFormatter"
    access = {"level": "INFO", "handlers": ["stderr"], "propagate": False} if access_log else {
        "level": "CRITICAL", "handlers": [], "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"kb": {"()": formatter}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "kb", "stream": "ext://sys.stderr"}},
        # gunicorn merges this over its defaults, whose root logger names a handler we replace.
        "root": {"level": level, "handlers": ["stderr"]},
        "loggers": {
            "gunicorn.error": {"level": level, "handlers": ["stderr"], "propagate": False},
            "gunicorn.access": access,
        },
    }


def lean_records() -> None:
    """Stop the logging module gathering what no formatter here prints: the caller's file and line
    (a stack walk per record), thread and process names (the pid is looked up when formatting).
    These are the documented switches of the logging HOWTO's "Optimization" section; every
    request writes a line, so they are worth a few percent of throughput (docs/benchmarks.md)."""
    logging._srcfile = None  # documented: no findCaller() per record
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def configure_logging(level: str = "INFO", as_json: bool = True, secrets: Iterable[str] = ()) -> None:
    """Log to stderr, one line per event, with no piece of any of `secrets` in a line."""
    global _redact
    _redact = Redactor(secrets)
    lean_records()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if as_json else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # The SDK logs every request at INFO; keep it for DEBUG.
    for noisy in ("mcp", "httpx", "httpx2", "urllib3"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
