"""Bearer-token auth for /mcp: 401 without a valid token, and the principal of a request that has one.

Three kinds of token, all accepted at once when configured:
- KB_MCP_API_KEY: static keys, each a full-access principal named by its caller id;
- KB_MCP_TOKENS_FILE: named static tokens with scopes and collections (credentials/named_tokens.py);
- KB_OAUTH_ISSUER: JWT access tokens from an authorization server (auth/oauth.py).

Static tokens are compared as SHA-256 digests of their raw bytes in constant time, so a token of any
length or encoding (non-ASCII included) is refused the same way, never with a 500. A JWT is verified on a
worker thread (a key fetch must never stall the event loop). A request that passes carries its principal
in the ASGI scope (auth/principal.py); with no auth configured every request is anonymous. With OAuth on,
every 401 names the protected-resource metadata (RFC 9728) so a client can find the authorization server.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Callable, Sequence

import anyio.to_thread

from kb_bridge.asgi_messages import ASGIApp, Receive, Scope, Send, header, send_json
from kb_bridge.auth.oauth import InvalidToken, OAuthVerifier, looks_like_jwt
from kb_bridge.auth.principal import ANONYMOUS, SCOPE_KEY, Principal, caller_id
from kb_bridge.credentials.named_tokens import NamedToken
from kb_bridge.credentials.secret import Secret
from kb_bridge.settings import McpSettings

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
    """The configured static tokens, as digests, each with the principal it stands for."""

    def __init__(self, keys: Sequence[Secret], named: Sequence[NamedToken] = ()) -> None:
        self._keys = [(hashlib.sha256(k.reveal().encode()).digest(), Principal(caller_id(k))) for k in keys]
        self._keys += [
            (t.sha256, Principal(t.name, scopes=t.scopes, collections=t.collections, kind="token")) for t in named
        ]

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


class Challenge:
    """The WWW-Authenticate values: RFC 6750 errors, plus the resource metadata URL when OAuth is on."""

    def __init__(self, metadata_url: str | None) -> None:
        self._metadata = metadata_url

    def unauthorized(self, token_sent: bool) -> bytes:
        params = [f'resource_metadata="{self._metadata}"'] if self._metadata else ['realm="kb-bridge"']
        if token_sent:
            params.append('error="invalid_token"')
        return ("Bearer " + ", ".join(params)).encode()

    def insufficient_scope(self, scope: str) -> bytes:
        params = ['error="insufficient_scope"', f'scope="{scope}"']
        if self._metadata:
            params.append(f'resource_metadata="{self._metadata}"')
        return ("Bearer " + ", ".join(params)).encode()


class Authenticator:
    """Every configured way to turn a token into a principal: static tokens first (constant time), then,
    with OAuth on, a JWT. Used by the /mcp door and by the console's sign-in."""

    def __init__(self, settings: McpSettings, verifier: OAuthVerifier | None = None) -> None:
        self.enabled = settings.auth_enabled
        self._keys = StaticKeys(settings.api_keys, settings.named_tokens)
        self._verifier = verifier

    def static(self, token: bytes) -> Principal | None:
        return self._keys.principal(token)

    def wants_jwt_check(self, token: bytes) -> bool:
        return self._verifier is not None and looks_like_jwt(token)

    def verify_jwt(self, token: bytes) -> tuple[Principal | None, str]:
        """(principal, "") or (None, reason); may fetch the issuer's keys: call it off the event loop."""
        if self._verifier is None:
            return None, "token_invalid"
        try:
            return self._verifier.verify(token.decode("ascii")), ""
        except UnicodeDecodeError:
            return None, "token_invalid"
        except InvalidToken as exc:
            return None, f"jwt_{exc.reason}"

    def principal(self, token: bytes) -> tuple[Principal | None, str]:
        """The blocking form of the whole check (the console's sign-in runs on a worker thread)."""
        found = self.static(token)
        if found is not None:
            return found, ""
        if self.wants_jwt_check(token):
            return self.verify_jwt(token)
        return None, "token_invalid"


class BearerAuth:
    """Requires `Authorization: Bearer <token>` for a token one of the configured modes accepts."""

    def __init__(self, app: ASGIApp, settings: McpSettings, on_failure: FailureHook,
                 authenticator: Authenticator | None = None, challenge: Challenge | None = None) -> None:
        self._app = app
        self._auth = authenticator or Authenticator(settings)
        self.challenge = challenge or Challenge(settings.oauth.metadata_url if settings.oauth.enabled else None)
        self._on_failure = on_failure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._auth.enabled:
            scope[SCOPE_KEY] = ANONYMOUS
            await self._app(scope, receive, send)
            return
        value = header(scope, b"authorization")
        token = bearer_token(value)
        principal, reason = await self._principal(token)
        if principal is None:
            reason = "token_missing" if value is None else reason
            self._on_failure(reason)
            logger.warning("refused an MCP request: %s", reason.replace("_", " "))
            await send_json(
                send, 401, {"error": "invalid_token", "error_description": "a valid bearer token is required"},
                [(b"www-authenticate", self.challenge.unauthorized(value is not None))],
            )
            return
        scope[SCOPE_KEY] = principal
        await self._app(scope, receive, send)

    async def _principal(self, token: bytes | None) -> tuple[Principal | None, str]:
        if token is None:
            return None, "token_invalid"
        principal = self._auth.static(token)
        if principal is not None:
            return principal, ""
        if not self._auth.wants_jwt_check(token):
            return None, "token_invalid"
        return await anyio.to_thread.run_sync(self._auth.verify_jwt, token)
