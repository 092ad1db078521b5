"""Bearer-token auth for /mcp with the static keys of KB_MCP_API_KEY: 401 without a valid one.

Tokens are compared as SHA-256 digests of their raw bytes in constant time, so a token of any length or
encoding (non-ASCII included) is refused the same way, never with a 500. A request that passes carries
its principal in the ASGI scope (auth/principal.py); with no keys configured every request is anonymous.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Callable, Sequence

from kb_bridge.asgi_messages import ASGIApp, Receive, Scope, Send, header, send_json
from kb_bridge.auth.principal import ANONYMOUS, SCOPE_KEY, Principal, caller_id
from kb_bridge.settings import Secret

logger = logging.getLogger(__name__)

FailureHook = Callable[[str], None]


def bearer_token(value: bytes | None) -> bytes | None:
    """The token of an `Authorization: Bearer <token>` header (scheme case-insensitive), or None."""
    if value is None:
        return None
    scheme, _, token = value.strip().partition(b" ")
    token = token.strip()
    if scheme.lower() != b"bearer" or not token:
        return None
    return token


class StaticKeys:
    """The configured keys, as digests, each with the principal it stands for."""

    def __init__(self, keys: Sequence[Secret]) -> None:
        self._keys = [(hashlib.sha256(k.reveal().encode()).digest(), Principal(caller_id(k))) for k in keys]

    def __bool__(self) -> bool:
        return bool(self._keys)

    def principal(self, token: bytes) -> Principal | None:
        digest = hashlib.sha256(token).digest()
        found = None
        for key_digest, principal in self._keys:
            # Compare against every key, always, so timing says nothing about which matched.
            if hmac.compare_digest(digest, key_digest):
                found = principal
        return found


class BearerAuth:
    """Requires `Authorization: Bearer <key>` for one of the configured keys; marks the principal."""

    def __init__(self, app: ASGIApp, keys: Sequence[Secret], on_failure: FailureHook) -> None:
        self._app = app
        self._keys = StaticKeys(keys)
        self._on_failure = on_failure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._keys:
            scope[SCOPE_KEY] = ANONYMOUS
            await self._app(scope, receive, send)
            return
        value = header(scope, b"authorization")
        token = bearer_token(value)
        principal = self._keys.principal(token) if token is not None else None
        if principal is None:
            reason = "missing" if value is None else "invalid"
            self._on_failure(f"token_{reason}")
            logger.warning("refused an MCP request: %s bearer token", reason)
            challenge = b'Bearer realm="kb-bridge"' + (b"" if value is None else b', error="invalid_token"')
            await send_json(
                send, 401, {"error": "invalid_token", "error_description": "a valid bearer token is required"},
                [(b"www-authenticate", challenge)],
            )
            return
        scope[SCOPE_KEY] = principal
        await self._app(scope, receive, send)
