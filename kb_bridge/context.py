"""Per-request context shared by the log lines of one request: its id, and what the engine
answered during the current tool call. Context variables follow a request across the event
loop and into the worker thread that runs its handler (asgiref copies the context)."""

from __future__ import annotations

import random
import re
from contextvars import ContextVar

request_id: ContextVar[str | None] = ContextVar("kb_request_id", default=None)
engine_trail: ContextVar[list[str] | None] = ContextVar("kb_engine_trail", default=None)
# Over HTTP, the fields of a request's tool event are handed to the app, which writes one line
# per request (the tool's outcome with the HTTP status); without it (stdio) the tool logs itself.
access_fields: ContextVar[dict[str, object] | None] = ContextVar("kb_access_fields", default=None)

_ACCEPTABLE_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def new_request_id(offered: str | None = None) -> str:
    """The caller's X-Request-Id when it is a sane token (to join logs across services), else a new one."""
    if offered is not None and _ACCEPTABLE_ID.fullmatch(offered):
        return offered
    # Ids need to be unique, not secret: the module PRNG (reseeded in each forked worker) costs no
    # system call, unlike secrets/os.urandom, and this runs on every request.
    return f"{random.getrandbits(64):016x}"


def note_engine_outcome(outcome: str) -> None:
    trail = engine_trail.get()
    if trail is not None:
        trail.append(outcome)
