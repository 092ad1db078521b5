"""create_app(settings): the one ASGI application gunicorn serves.

`/mcp` goes through the Host/Origin guard and bearer auth to the MCP Streamable HTTP transport
(stateless: any worker or replica can take any request); every other path goes to the Flask
operational app. The ASGI lifespan runs the MCP session manager, which runs the bridge's own
lifespan (thread pool, upload sweeper).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from asgiref.wsgi import WsgiToAsgi
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager

from kb_bridge import context, tools
from kb_bridge.mcp_server import CALLER_SCOPE_KEY, build_server
from kb_bridge.runtime import Bridge
from kb_bridge.security import BearerAuth, HostOriginGuard
from kb_bridge.settings import Settings, load_settings
from kb_bridge.tools.spec import ToolSpec
from kb_bridge.web import create_web_app

logger = logging.getLogger(__name__)
access_logger = logging.getLogger("kb_bridge.access")

MCP_PATHS = ("/mcp", "/mcp/")


class BridgeApp:
    """Routes ASGI traffic and owns the lifespan."""

    def __init__(self, bridge: Bridge, mcp: Any, web: Any, manager: StreamableHTTPSessionManager) -> None:
        self.bridge = bridge
        self._mcp = mcp
        self._web = web
        self._manager = manager

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "http":
            await self._http(scope, receive, send)

    async def _http(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Route one request, with a request id in every log line it causes and one access event."""
        offered = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"x-request-id"), None)
        rid = context.new_request_id(offered)
        context.request_id.set(rid)
        started = time.perf_counter()
        status = [0]

        async def send_with_id(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(message)

        app = self._mcp if scope.get("path") in MCP_PATHS else self._web
        try:
            await app(scope, receive, send_with_id)
        finally:
            access_logger.info(
                "http_request",
                extra={
                    "event": "http_request",
                    "method": scope.get("method"),
                    "path": scope.get("path"),
                    "status": status[0],
                    "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                    "client": (scope.get("client") or ("", 0))[0],
                },
            )

    async def _lifespan(self, receive: Any, send: Any) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        try:
            async with self._manager.run():
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
    manager = StreamableHTTPSessionManager(
        app=build_server(bridge, available),
        stateless=True,
        json_response=settings.mcp.json_response,
        # Host/Origin are checked once, by HostOriginGuard, before auth.
        security_settings=None,
        max_request_body_size=settings.mcp.max_body_bytes,
    )
    mcp: Any = StreamableHTTPASGIApp(manager)
    mcp = BearerAuth(mcp, settings.mcp.api_keys, CALLER_SCOPE_KEY, bridge.metrics.auth_failure)
    mcp = HostOriginGuard(mcp, settings.mcp.allowed_hosts, settings.mcp.allowed_origins, bridge.metrics.auth_failure)
    return BridgeApp(bridge, mcp, WsgiToAsgi(create_web_app(bridge)), manager)
