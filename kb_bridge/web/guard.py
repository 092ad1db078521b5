"""The DNS-rebinding guard in front of every path: a Host not allowed is 421, an Origin not allowed is 403.

It wraps the whole router (protocol/app.py BridgeApp), so /mcp, the console, /healthz, /readyz, /metrics,
the OAuth metadata and static files are guarded alike, and it runs before auth and before any body is read,
so a browser tricked by DNS rebinding learns nothing, not even whether a token would be needed, and a
keyless bridge's console is not reachable under a rebinding host name. Requests without Origin (non-browser
clients) pass. Probes must send an allowed Host too (a load balancer probing by IP address: add it to
KB_MCP_ALLOWED_HOSTS).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from kb_bridge.asgi_messages import ASGIApp, Receive, Scope, Send, header, send_json
from kb_bridge.digits import is_port

logger = logging.getLogger(__name__)

FailureHook = Callable[[str], None]


def matches(value: str, patterns: Sequence[str]) -> bool:
    """Exact (case-insensitive) match, `prefix:*` for any port, or `*` for anything."""
    value = value.lower()
    for pattern in patterns:
        pattern = pattern.lower()
        if pattern == "*" or pattern == value:
            return True
        if pattern.endswith(":*") and value.startswith(pattern[:-1]) and is_port(value[len(pattern) - 1 :]):
            return True
    return False


class HostOriginGuard:
    def __init__(self, app: ASGIApp, hosts: Sequence[str], origins: Sequence[str], on_failure: FailureHook) -> None:
        self._app = app
        self._hosts = tuple(hosts)
        self._origins = tuple(origins)
        self._on_failure = on_failure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = (header(scope, b"host") or b"").decode("latin-1")
        if not host or not matches(host, self._hosts):
            self._on_failure("host")
            logger.warning("refused a request for host %r (not in KB_MCP_ALLOWED_HOSTS)", host[:100])
            await send_json(send, 421, {"error": "misdirected_request", "error_description": "Host not allowed"})
            return
        origin = header(scope, b"origin")
        if origin is not None and not matches(origin.decode("latin-1"), self._origins):
            self._on_failure("origin")
            logger.warning("refused a request from origin %r (not in KB_MCP_ALLOWED_ORIGINS)", origin[:100])
            await send_json(send, 403, {"error": "forbidden", "error_description": "Origin not allowed"})
            return
        await self._app(scope, receive, send)
