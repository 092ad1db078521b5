"""create_app(settings): the one ASGI application gunicorn serves.

`/mcp` goes through the Host/Origin guard and bearer auth to the MCP Streamable HTTP transport
(stateless: any worker or replica can take any request); every other path goes to the Flask
operational app. The ASGI lifespan runs the MCP session manager, which runs the bridge's own
lifespan (thread pool, upload sweeper).
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from typing import Any

from asgiref.wsgi import WsgiToAsgi
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from kb_bridge.tools import registry as tools
from kb_bridge.access_log import AccessLog
from kb_bridge.auth.bearer import BearerAuth
from kb_bridge.protocol.server import build_server
from kb_bridge.runtime import Bridge
from kb_bridge.settings import Settings, load_settings
from kb_bridge.tools.spec import ToolSpec
from kb_bridge.web.guard import HostOriginGuard
from kb_bridge.web.ops import create_web_app

logger = logging.getLogger(__name__)

MCP_PATHS = ("/mcp", "/mcp/")


class ResponseModeRouter:
    """Sends each /mcp POST to the JSON or the SSE transport.

    A client can only receive progress notifications on an SSE answer, and only asks for them by
    putting a progress token in the request. So a request without one gets the cheaper JSON answer.
    The token is looked for as bytes in the body: a false positive (the word inside an argument)
    merely costs an SSE answer, never a wrong one.
    """

    def __init__(self, json_app: Any, sse_app: Any, max_body_bytes: int) -> None:
        self._json = json_app
        self._sse = sse_app
        self._max = max_body_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        declared = next((v for k, v in scope.get("headers", ()) if k == b"content-length"), b"0")
        if scope.get("method") != "POST" or not declared.isdigit() or int(declared) > self._max:
            # Not a call, or refused (413) by the transport before it reads a byte.
            await self._sse(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max:
                await _send_too_large(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await (self._sse if b'"progressToken"' in body else self._json)(scope, replay, send)


async def _send_too_large(send: Any) -> None:
    body = b"Request body too large"
    await send({"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class BridgeApp:
    """Routes ASGI traffic (/mcp to the MCP door, the rest to Flask) and owns the lifespan."""

    def __init__(self, bridge: Bridge, mcp: Any, web: Any, managers: list[StreamableHTTPSessionManager]) -> None:
        self.bridge = bridge
        self._mcp = mcp
        self._web = web
        self._managers = managers
        self._http = AccessLog(self._route)

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
            "KB_MCP_API_KEY is not set: anyone who can reach %s can read and write the knowledge base. "
            "Keep it bound to 127.0.0.1 or set a key.",
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

    # Host/Origin are checked once, by HostOriginGuard, before auth; the SDK's own check stays off.
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

    mode = settings.mcp.response_mode
    managers = [transport(json_response=(mode == "json"))]
    mcp: Any = StreamableHTTPASGIApp(managers[0])
    if mode == "auto":
        managers.append(transport(json_response=True))
        mcp = ResponseModeRouter(StreamableHTTPASGIApp(managers[1]), mcp, settings.mcp.max_body_bytes)
    mcp = BearerAuth(mcp, settings.mcp.api_keys, bridge.metrics.auth_failure)
    mcp = HostOriginGuard(mcp, settings.mcp.allowed_hosts, settings.mcp.allowed_origins, bridge.metrics.auth_failure)
    return BridgeApp(bridge, mcp, WsgiToAsgi(create_web_app(bridge)), managers)
