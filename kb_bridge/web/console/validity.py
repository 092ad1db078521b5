"""Whether a console session still stands: its token is asked about again on every request, exactly as /mcp
asks about a bearer token, so a session lasts no longer than its token does.

A static token removed from KB_MCP_TOKENS_FILE (read when the bridge starts: restart it to revoke) or an API
key taken out of KB_MCP_API_KEY no longer makes a principal; a JWT past its `exp` (or signed by a key the
issuer no longer publishes) no longer verifies; a token that now names another principal ends the session
too. The principal each request acts as is the one the token makes now, so changed scopes or collections
apply at once. Sessions.start also ends a JWT's session at its `exp` exactly: the verifier allows 60 s of
clock skew, which a session that outlives its token has no need of.
"""

from __future__ import annotations

import jwt

from kb_bridge.auth.bearer import Authenticator
from kb_bridge.auth.principal import ANONYMOUS, Principal
from kb_bridge.web.console.sessions import Session


def token_expiry(principal: Principal, token: bytes) -> float | None:
    """When a token the authenticator accepted stops being valid: a JWT's `exp`; None for a static token."""
    if principal.kind != "oauth":
        return None
    try:
        # Already verified by the authenticator, signature and all: only the claim is read here.
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return None
    exp = claims.get("exp")
    return float(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool) else None


def current_principal(authenticator: Authenticator, session: Session) -> tuple[Principal | None, str]:
    """(the principal the session's token makes now, "") or (None, a reason fit for logs, never the token)."""
    if not authenticator.enabled:
        return ANONYMOUS, ""  # a bridge without auth: the console is as open as /mcp
    token = session.token()
    if token is None:
        return None, "no_token"  # signed in when the bridge had no auth, or a record that does not open
    principal, reason = authenticator.principal(token)
    if principal is None:
        return None, reason or "token_invalid"
    if (principal.kind, principal.name) != (session.principal.kind, session.principal.name):
        return None, "principal_changed"
    return principal, ""
