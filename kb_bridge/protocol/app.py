"""create_app(settings): the one ASGI application gunicorn serves.

Every request passes the Host/Origin guard first (a DNS-rebinding page reaches no path, the console
included). Then `/mcp` goes through bearer auth to the MCP Streamable HTTP transport (stateless: any worker
or replica can take any request); every other path goes through its body limit to the Flask app
(operational endpoints and the console), served on a bounded thread pool of its own (web/wsgi.py). The
ASGI lifespan runs the MCP session manager, which runs the bridge's own lifespan (thread pool, upload
sweeper).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import mcp_types as types
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from kb_bridge.access_log import AccessLog
from kb_bridge.asgi_messages import header, send_json, trimmed_headers, with_header
from kb_bridge.auth.bearer import Authenticator, BearerAuth, Challenge
from kb_bridge.auth.oauth import OAuthVerifier
from kb_bridge.auth.principal import ALL_SCOPES, Principal, principal_of
from kb_bridge.protocol import envelope
from kb_bridge.protocol.scopes import ScopeRules
from kb_bridge.protocol.server import build_server
from kb_bridge.runtime import Bridge
from kb_bridge.settings import Settings, load_settings
from kb_bridge.tools import registry as tools
from kb_bridge.tools.spec import ToolSpec
from kb_bridge.web.body_limit import BodyLimit, BodyLimits, routed_by
from kb_bridge.web.guard import HostOriginGuard
from kb_bridge.web.ops import create_web_app
from kb_bridge.web.wsgi import serve_wsgi

logger = logging.getLogger(__name__)

MCP_PATHS = ("/mcp", "/mcp/")


class McpEndpoint:
    """/mcp after the door: bounds and checks the request body, then hands the request to a transport.

    A POST whose Content-Type is not JSON is answered 415 before its body is read. The body is read whole
    (the transport would read it whole anyway) up to KB_MCP_MAX_BODY_BYTES; a larger one, declared by
    Content-Length or only found while reading a chunked body, is answered 413 with a JSON-RPC error body
    before any of it is parsed. It is then parsed once and its JSON-RPC envelope checked (envelope.py: a
    request the SDK would drop as a notification, or refuse with pydantic's text, is answered -32600 here),
    and the message asks for the token's scopes (scopes.py). The body then picks the transport: a client can
    only receive progress notifications on an SSE answer, and only asks for them by putting a progress
    token in the request, so in "auto" mode a request without one gets the cheaper JSON answer. (The token
    is looked for as bytes: a false positive, the word inside an argument, merely costs an SSE answer.)
    Any other method is 405: a stateless server has no session, so no stream of server-initiated messages
    to open with GET (the MCP transport allows answering it 405) and nothing to end with DELETE; an open
    GET stream would only hold a connection forever.
    """

    def __init__(self, json_app: Any, sse_app: Any, mode: str, max_body_bytes: int,
                 rules: ScopeRules, challenge: Challenge, on_refusal: Callable[[str], None]) -> None:
        self._json = json_app
        self._sse = sse_app
        self._mode = mode
        self._max = max_body_bytes
        self._rules = rules
        self._challenge = challenge
        self._on_refusal = on_refusal

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("method") != "POST":
            await send_json(send, 405, {"jsonrpc": "2.0", "id": None, "error": {
                "code": types.INVALID_REQUEST, "message": "this stateless MCP endpoint takes POST only"}}, [(b"allow", b"POST")])
            return
        if not envelope.is_json(header(scope, b"content-type")):
            await send_json(send, 415, envelope.UNSUPPORTED_MEDIA_TYPE.body())
            return
        declared = header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self._max:
            await self._too_large(send)
            return
        body = await self._read(receive)
        if body is None:
            await self._too_large(send)
            return
        message = envelope.read(body)
        if isinstance(message, envelope.Refusal):
            await send_json(send, message.status, message.body())
            return
        trimmed = trimmed_headers(scope)
        unsupported = envelope.unsupported_version(header(trimmed, b"mcp-protocol-version"), message)
        if unsupported is not None:
            await send_json(send, unsupported.status, unsupported.body())
            return
        principal = principal_of(scope)
        if principal.scopes != ALL_SCOPES and await self._refused(principal, message, send):
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        wants_sse = self._mode == "sse" or (self._mode == "auto" and b'"progressToken"' in body)
        # The SDK compares the Content-Type with "application/json" exactly: it gets the media type it knows.
        sdk_scope = with_header(trimmed, b"content-type", envelope.JSON.encode())
        await (self._sse if wants_sse else self._json)(sdk_scope, replay, send)

    async def _read(self, receive: Any) -> bytes | None:
        """The whole body, or None as soon as it passes the limit."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away: the transport will see an empty body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    async def _refused(self, principal: Principal, message: dict[str, Any], send: Any) -> bool:
        """403 with a step-up challenge when the message asks for something the token's scopes do not allow."""
        needed = self._rules.needed(message)
        if needed is None or principal.can(needed[0]):
            return False
        scope, what = needed
        self._on_refusal("insufficient_scope")
        logger.warning("refused %s to %s: the token lacks the %s scope", what, principal.name, scope)
        await send_json(
            send, 403,
            {"error": "insufficient_scope", "error_description": f"{what} needs the {scope} scope", "scope": scope},
            [(b"www-authenticate", self._challenge.insufficient_scope(scope))],
        )
        return True

    async def _too_large(self, send: Any) -> None:
        message = f"the request body is larger than this server accepts ({self._max} bytes, KB_MCP_MAX_BODY_BYTES)"
        await send_json(send, 413, {"jsonrpc": "2.0", "id": None, "error": {"code": types.INVALID_REQUEST, "message": message}})


class BridgeApp:
    """Guards every request (Host/Origin), routes it (/mcp to the MCP door, the rest to Flask) and owns the
    lifespan."""

    def __init__(self, bridge: Bridge, mcp: Any, web: Any, managers: list[StreamableHTTPSessionManager],
                 verifier: OAuthVerifier | None = None) -> None:
        self.bridge = bridge
        self._verifier = verifier
        self._mcp = mcp
        self._web = web
        self._managers = managers
        mcp_settings = bridge.settings.mcp
        # One guard in front of the router, before auth and before any body is read: no path is left out.
        guarded = HostOriginGuard(self._route, mcp_settings.allowed_hosts, mcp_settings.allowed_origins,
                                  bridge.metrics.auth_failure)
        self._http = AccessLog(guarded)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "http":
            await self._http(scope, receive, send)

    async def _route(self, scope: Any, receive: Any, send: Any) -> None:
        app = self._mcp if scope.get("path") in MCP_PATHS else self._web
        await app(scope, receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        try:
            async with AsyncExitStack() as stack:
                for manager in self._managers:
                    await stack.enter_async_context(manager.run())
                _warn_if_open(self.bridge.settings)
                if self._verifier is not None:
                    # Fetch the issuer's keys now, off the event loop, so a problem is logged at start.
                    asyncio.get_running_loop().run_in_executor(None, self._verifier.prime)
                await send({"type": "lifespan.startup.complete"})
                await receive()  # lifespan.shutdown
                logger.info("shutting down: finishing in-flight tool calls")
        except Exception as exc:
            logger.exception("kb-bridge failed to start or stop cleanly")
            await send({"type": "lifespan.startup.failed", "message": type(exc).__name__})
            return
        await send({"type": "lifespan.shutdown.complete"})


def _warn_if_open(settings: Settings) -> None:
    if not settings.mcp.auth_enabled:
        logger.warning(
            "KB_MCP_API_KEY is not set (nor KB_MCP_TOKENS_FILE or KB_OAUTH_ISSUER): anyone who can reach %s can read and write the knowledge base. "
            "Keep it bound to 127.0.0.1 or configure auth.",
            settings.server.bind,
        )


def create_app(
    settings: Settings | None = None, bridge: Bridge | None = None, available: tuple[ToolSpec, ...] = tools.ALL_TOOLS
) -> BridgeApp:
    """The ASGI app. `available` is the tool set to select from (an embedding application or a
    benchmark may add its own ToolSpecs)."""
    settings = settings or load_settings()
    bridge = bridge or Bridge(settings)
    server = build_server(bridge, available)
    oauth = settings.mcp.oauth
    verifier = OAuthVerifier(oauth) if oauth.enabled else None
    challenge = Challenge(oauth.metadata_url if oauth.enabled else None)

    # Host/Origin are checked once, by HostOriginGuard (BridgeApp, every path), before auth; the SDK's own check stays off.
    # One settings object for every request: given None, the SDK builds a pydantic model per request.
    sdk_security = TransportSecuritySettings(enable_dns_rebinding_protection=False)

    def transport(json_response: bool) -> StreamableHTTPSessionManager:
        return StreamableHTTPSessionManager(
            app=server,
            stateless=True,
            json_response=json_response,
            security_settings=sdk_security,
            max_request_body_size=settings.mcp.max_body_bytes,
        )

    managers = [transport(json_response=True), transport(json_response=False)]
    mcp: Any = McpEndpoint(
        StreamableHTTPASGIApp(managers[0]), StreamableHTTPASGIApp(managers[1]), settings.mcp.response_mode,
        settings.mcp.max_body_bytes, ScopeRules(tools.select(settings.mcp, available)), challenge,
        bridge.metrics.auth_failure,
    )
    authenticator = Authenticator(settings.mcp, verifier)
    mcp = BearerAuth(mcp, settings.mcp, bridge.metrics.auth_failure, authenticator, challenge)
    # Console pages run the same tool handlers as /mcp: as many at once per process as tool calls.
    flask_app = create_web_app(bridge, authenticator, available)
    web = serve_wsgi(flask_app, threads=settings.mcp.thread_pool_size)
    web = BodyLimit(web, BodyLimits.for_settings(settings), routed_by(flask_app))
    return BridgeApp(bridge, mcp, web, managers, verifier)
