"""Task ids that hold their own state (issue 38 item 2): no worker keeps a task, so any worker or bridge host
answers tasks/get, tasks/result and tasks/cancel for a task another one created.

An id is the task's reference (whose it is, which tool, the engine job, the result known when it was made),
sealed with AES-256-GCM: base64url of a random nonce and the ciphertext with its tag. Sealed, not only signed,
because clients send the id back in the `Mcp-Name` header of every 2026-era tasks/get (SEP-2243), where proxies
log it: an id reveals nothing of the note or the file, nor whose task it is. An id has at most MAX_ID_CHARS
characters, well inside the header limits of common proxies (nginx's 8 KB): a result whose sealed id would be
longer is replaced by a reference the bridge reads it again from (tools/task_results.py). The key is derived
from the secrets every worker and host of one deployment shares (`KB_API_KEY`, `KB_MCP_API_KEY`,
`KB_METRICS_TOKEN`, `KB_MCP_TASK_KEY`; the digests of `KB_MCP_TOKENS_FILE`'s tokens only when none of the engine key,
the metrics token and the task key is set, since a SIGHUP's reload of an edited file changes them) and the engine
URL, so each
of them opens an id the others made, and a caller can neither forge one nor edit one (another job id, another
principal). An id names its principal (`owner`, the same per-credential id uploads use), and a task is answered
only to that principal; the job is still checked against the caller's collections (tools/reach.py job_visible)
on every read.

Two configurations hold none of those secrets. Without auth every caller is the one anonymous principal with
every right, so an id anyone could seal gives nothing a caller could not do itself: the key is derived from the
engine URL (whoever knows it can open an id, as anyone can call every tool), and every worker and host still
answers every task. OAuth in front of a keyless engine has callers
of different reach and nothing they cannot know: it seals with a random key, made once per server
(serving/gunicorn.py puts it in `KB_MCP_TASK_KEY` before the workers start, so they share it) or once per
process; its replicas need the same `KB_MCP_TASK_KEY` to answer each other's tasks (README, "Configuration").
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import hashlib
import json
import re
import secrets
import zlib
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from kb_bridge.settings import Settings
from kb_bridge.tools import task_results
from kb_bridge.tools.spec import Result

# The longest id made or accepted. A reference (tools/task_results.py) seals to well under it whatever the tool
# answered (tests/test_tasks.py checks the largest); a whole result is kept when it fits, as most do.
MAX_ID_CHARS = 512
_NONCE_BYTES = 12
_TAG_BYTES = 16
_ID_RE = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class TaskRef:
    owner: str  # Principal.owner of the caller who made the task
    tool: str
    job_id: int | None  # the engine job the task follows; None for a task done when made (kb_update_note)
    result: Result  # the tool's result when the task was made, or (`whole` False) its reference
    created: str  # ISO-8601 UTC: when the task was made (a job task shows its job's own times)
    whole: bool = True  # False: `result` is a reference the result is read again from (tools/task_results.py)


def task_key(settings: Settings) -> bytes:
    """The AES-256 key ids are sealed with (the module's docstring says why each)."""
    if settings.shares_no_secret:
        return _process_key()
    material = "\0".join(["kb-bridge task ids v1", settings.engine.url, *sorted(settings.shared_secrets())])
    return hashlib.sha256(material.encode("utf-8", "surrogateescape")).digest()


@functools.cache
def _process_key() -> bytes:
    """A random key, made once per process when first needed (every server built in it shares it)."""
    return secrets.token_bytes(32)


def encode(ref: TaskRef, key: bytes) -> str:
    """The id of a task: its whole result when that fits in MAX_ID_CHARS, else its result's reference."""
    task_id = _seal(ref, key)
    if len(task_id) > MAX_ID_CHARS and ref.whole:
        task_id = _seal(dataclasses.replace(ref, result=task_results.reference(ref.tool, ref.result), whole=False), key)
    if len(task_id) > MAX_ID_CHARS:
        raise ValueError(f"a task id of {len(task_id)} characters")  # a reference is bounded: never
    return task_id


def decode(task_id: str, key: bytes) -> TaskRef | None:
    """The reference an id holds, or None for anything this configuration did not seal."""
    if len(task_id) > MAX_ID_CHARS or not _ID_RE.fullmatch(task_id):
        return None
    try:
        sealed = base64.urlsafe_b64decode(task_id + "=" * (-len(task_id) % 4))
        if len(sealed) < _NONCE_BYTES + _TAG_BYTES:
            return None
        plain = AESGCM(key).decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], None)
        data: Any = json.loads(zlib.decompress(plain, wbits=-zlib.MAX_WBITS))
    except (binascii.Error, InvalidTag, ValueError, zlib.error):
        return None
    try:
        job, whole = data["j"], "r" in data
        ref = TaskRef(owner=data["o"], tool=data["t"], job_id=job, result=data["r" if whole else "x"],
                      created=data["c"], whole=whole)
    except (KeyError, TypeError):
        return None
    if not (isinstance(ref.owner, str) and isinstance(ref.tool, str) and isinstance(ref.result, dict)
            and isinstance(ref.created, str) and (job is None or (isinstance(job, int) and not isinstance(job, bool)))):
        return None
    return ref


def _seal(ref: TaskRef, key: bytes) -> str:
    # Compact UTF-8 JSON: \u escapes would make a non-ASCII title six bytes a character where it takes two.
    # surrogatepass: a lone surrogate from the engine's JSON goes through, as json.loads reads bytes back.
    data = {"o": ref.owner, "t": ref.tool, "j": ref.job_id, "r" if ref.whole else "x": ref.result, "c": ref.created}
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")
    # Deflated (raw, no header): the field names and times shrink to a third, so more results stay whole. What
    # its length could tell a caller is only what the call answers that caller anyway.
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    plain = deflate.compress(text) + deflate.flush()
    nonce = secrets.token_bytes(_NONCE_BYTES)
    return base64.urlsafe_b64encode(nonce + AESGCM(key).encrypt(nonce, plain, None)).decode("ascii").rstrip("=")
