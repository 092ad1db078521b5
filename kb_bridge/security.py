"""The door of /mcp: DNS-rebinding guard (Host 421, Origin 403), then bearer-token auth (401).

Both are plain ASGI middleware in front of the MCP transport, checked in that order so a
browser tricked by DNS rebinding learns nothing, not even whether a token would be needed.
Tokens are compared as SHA-256 digests of their raw bytes in constant time, so a token of any
length or encoding (non-ASCII included) is refused the same way, never with a 500.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from kb_bridge.settings import Secret

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
ASGIApp = Callable[..., Any]
FailureHook = Callable[[str], None]

ANONYMOUS_CALLER = "anonymous"


def caller_id(key: Secret) -> str:
    """A stable, non-secret id for a token: names its uploads and appears in logs.

    PBKDF2 rather than a bare hash, so a logged id does not help anyone guess a weak key offline;
    computed once per configured key at start-up.
    """
    return hashlib.pbkdf2_hmac("sha256", key.reveal().encode(), b"kb-bridge caller id", 50_000)[:8].hex()


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value
    return None


async def _send_json(send: Callable[..., Any], status: int, body: dict[str, Any], extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def _matches(value: str, patterns: Sequence[str]) -> bool:
    """Exact (case-insensitive) match, `prefix:*` for any port, or `*` for anything."""
    value = value.lower()
    for pattern in patterns:
        pattern = pattern.lower()
        if pattern == "*" or pattern == value:
            return True
        if pattern.endswith(":*") and value.startswith(pattern[:-1]) and value[len(pattern) - 1 :].isdigit():
            return True
    return False


class HostOriginGuard:
    """421 for a Host not allowed, 403 for an Origin not allowed (no Origin is fine: not a browser)."""

    def __init__(self, app: ASGIApp, hosts: Sequence[str], origins: Sequence[str], on_failure: FailureHook) -> None:
        self._app = app
        self._hosts = tuple(hosts)
        self._origins = tuple(origins)
        self._on_failure = on_failure

    async def __call__(self, scope: Scope, receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        host = (_header(scope, b"host") or b"").decode("latin-1")
        if not host or not _matches(host, self._hosts):
            self._on_failure("host")
            logger.warning("refused a request for host %r (not in KB_MCP_ALLOWED_HOSTS)", host[:100])
            await _send_json(send, 421, {"error": "misdirected_request", "error_description": "Host not allowed"})
            return
        origin = _header(scope, b"origin")
        if origin is not None and not _matches(origin.decode("latin-1"), self._origins):
            self._on_failure("origin")
            logger.warning("refused a request from origin %r (not in KB_MCP_ALLOWED_ORIGINS)", origin[:100])
            await _send_json(send, 403, {"error": "forbidden", "error_description": "Origin not allowed"})
            return
        await self._app(scope, receive, send)


class BearerAuth:
    """Requires `Authorization: Bearer <key>` for one of the configured keys; marks the caller."""

    def __init__(
        self, app: ASGIApp, keys: Sequence[Secret], caller_key: str, on_failure: FailureHook
    ) -> None:
        self._app = app
        # (digest of the key, caller id), computed once.
        self._keys = [(hashlib.sha256(k.reveal().encode()).digest(), caller_id(k)) for k in keys]
        self._caller_key = caller_key
        self._on_failure = on_failure

    def _caller(self, header: bytes | None) -> str | None:
        if header is None:
            return None
        scheme, _, token = header.strip().partition(b" ")
        token = token.strip()
        if scheme.lower() != b"bearer" or not token:
            return None
        digest = hashlib.sha256(token).digest()
        found = None
        for key_digest, caller in self._keys:
            # Compare against every key, always, so timing says nothing about which matched.
            if hmac.compare_digest(digest, key_digest):
                found = caller
        return found

    async def __call__(self, scope: Scope, receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if not self._keys:
            scope[self._caller_key] = ANONYMOUS_CALLER
            await self._app(scope, receive, send)
            return
        header = _header(scope, b"authorization")
        caller = self._caller(header)
        if caller is None:
            reason = "missing" if header is None else "invalid"
            self._on_failure(f"token_{reason}")
            logger.warning("refused an MCP request: %s bearer token", reason)
            challenge = b'Bearer realm="kb-bridge"' + (b'' if header is None else b', error="invalid_token"')
            await _send_json(
                send,
                401,
                {"error": "invalid_token", "error_description": "a valid bearer token is required"},
                [(b"www-authenticate", challenge)],
            )
            return
        scope[self._caller_key] = caller
        await self._app(scope, receive, send)
