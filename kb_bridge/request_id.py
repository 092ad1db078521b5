"""The id of the request being served: set by the access log middleware (access_log.py) when a request
arrives, read by the log formatters (logs.py) for every line the request causes.

A leaf of its own so that logs.py, which the local engine also uses, needs nothing of the bridge's
access log (and through it auth and settings) to stamp lines. The context variable follows the request
across the event loop and into the worker thread that runs a handler (asgiref copies the context).
"""

from __future__ import annotations

import random
import re
from contextvars import ContextVar

current: ContextVar[str | None] = ContextVar("kb_request_id", default=None)

_ACCEPTABLE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def new(offered: str | None = None) -> str:
    """The caller's X-Request-Id when it is a sane token (to join logs across services), else a new one."""
    if offered is not None and _ACCEPTABLE.fullmatch(offered):
        return offered
    # Ids need to be unique, not secret: the module PRNG (reseeded in each forked worker) costs no
    # system call, unlike secrets/os.urandom, and this runs on every request.
    return f"{random.getrandbits(64):016x}"
