"""Task ids that hold their own state (issue 38 item 2): no worker keeps a task, so any worker or bridge host
answers tasks/get, tasks/result and tasks/cancel for a task another one created.

An id is the task's reference (whose it is, which tool, the engine job, the result known when it was made)
as base64url JSON, a dot, and an HMAC-SHA256 of that text. The key is derived from the secrets every worker and
host of one deployment shares (`KB_API_KEY`, `KB_MCP_API_KEY`, `KB_METRICS_TOKEN`, `KB_MCP_TASK_KEY`, the
digests of `KB_MCP_TOKENS_FILE`'s tokens) and the engine URL, so each of them checks an id the others made,
and a caller can neither forge one nor edit one (another job id, another principal). An id names its
principal (`owner`, the same per-credential id uploads use), and a task is answered only to that principal;
the job is still checked against the caller's collections (tools/reach.py job_visible) on every read.

Two configurations hold none of those secrets. Without auth every caller is the one anonymous principal with
every right, so an id anyone could sign gives nothing a caller could not do itself: the key is derived from the
engine URL, and every worker and host still answers every task. OAuth in front of a keyless engine has callers
of different reach and nothing they cannot know: it signs with a random key, made once per server
(serving/gunicorn.py puts it in `KB_MCP_TASK_KEY` before the workers start, so they share it) or once per
process; its replicas need the same `KB_MCP_TASK_KEY` to answer each other's tasks (README, "Configuration").
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any

from kb_bridge.settings import Settings
from kb_bridge.tools.spec import Result

_SIGNATURE_BYTES = 16


@dataclass(frozen=True)
class TaskRef:
    owner: str  # Principal.owner of the caller who made the task
    tool: str
    job_id: int | None  # the engine job the task follows; None for a task done when made (kb_update_note)
    result: Result  # the tool's result when the task was made
    created: str  # ISO-8601 UTC: when the task was made (a job task shows its job's own times)


def task_key(settings: Settings) -> bytes:
    """The key ids are signed with (the module's docstring says why each)."""
    if settings.shares_no_secret:
        return _process_key()
    material = "\0".join(["kb-bridge task ids v1", settings.engine.url, *sorted(settings.shared_secrets())])
    return hashlib.sha256(material.encode("utf-8", "surrogateescape")).digest()


@functools.cache
def _process_key() -> bytes:
    """A random key, made once per process when first needed (every server built in it shares it)."""
    return secrets.token_bytes(32)


def encode(ref: TaskRef, key: bytes) -> str:
    data = {"o": ref.owner, "t": ref.tool, "j": ref.job_id, "r": ref.result, "c": ref.created}
    body = _b64(json.dumps(data, separators=(",", ":"), sort_keys=True).encode())
    return f"{body}.{_b64(_sign(body, key))}"


def decode(task_id: str, key: bytes) -> TaskRef | None:
    """The reference an id holds, or None for anything this configuration did not sign."""
    body, dot, signature = task_id.partition(".")
    if not dot or len(task_id) > 64_000:
        return None
    try:
        if not hmac.compare_digest(_unb64(signature), _sign(body, key)):
            return None
        data: Any = json.loads(_unb64(body))
    except (binascii.Error, ValueError):
        return None
    try:
        job = data["j"]
        ref = TaskRef(owner=data["o"], tool=data["t"], job_id=job, result=data["r"], created=data["c"])
    except (KeyError, TypeError):
        return None
    if not (isinstance(ref.owner, str) and isinstance(ref.tool, str) and isinstance(ref.result, dict)
            and isinstance(ref.created, str) and (job is None or (isinstance(job, int) and not isinstance(job, bool)))):
        return None
    return ref


def _sign(body: str, key: bytes) -> bytes:
    return hmac.new(key, body.encode("ascii", "replace"), hashlib.sha256).digest()[:_SIGNATURE_BYTES]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
