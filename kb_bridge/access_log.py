"""The access log: one line per request, and everything that goes into it.

Over HTTP every request writes exactly one line when it ends: `http_request` (method, path, status,
duration_ms, client), or for a tool call the tool's own event, `mcp_tool_success` or `mcp_tool_error`
(tool, caller, duration_ms of the tool, outcome, result_count or code, and `engine_status`: what the
engine answered attempt by attempt), with the same HTTP fields and `request_ms`. Over stdio there is no
HTTP request, so the tool event is written on its own.

Context variables carry a request's pending access fields and its engine trail across the event loop and
into the worker thread that runs the handler (asgiref copies the context); its id is request_id.py's, which
the log formatters read too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from contextvars import ContextVar
from typing import Any

from kb_bridge import request_id
from kb_bridge.auth.principal import SCOPE_KEY, Principal
from kb_bridge.logs import ACCESS_LOGGER

logger = logging.getLogger(ACCESS_LOGGER)

_engine_trail: ContextVar[list[str] | None] = ContextVar("kb_engine_trail", default=None)
_fields: ContextVar[dict[str, Any] | None] = ContextVar("kb_access_fields", default=None)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def note_engine_outcome(outcome: str) -> None:
    """One engine attempt's outcome (HTTP status or transport error), for the current tool call's line."""
    trail = _engine_trail.get()
    if trail is not None:
        trail.append(outcome)


class ToolCall:
    """Times one tool call and records its outcome in the access line (or logs it, without one)."""

    def __init__(self, tool: str, caller: str) -> None:
        self.tool = tool
        self.caller = caller
        self._started = time.perf_counter()
        self._trail: list[str] = []
        _engine_trail.set(self._trail)
        # DEBUG: the success or error line that follows carries the same fields and the outcome.
        logger.debug("mcp_tool_invoke", extra={"fields": {"event": "mcp_tool_invoke", "tool": tool, "caller": caller}})

    def seconds(self) -> float:
        return time.perf_counter() - self._started

    def finish(self, outcome: str, result_count: int | None = None) -> float:
        """Record the outcome ("ok" or an error code); returns the call's duration in seconds."""
        seconds = self.seconds()
        fields: dict[str, Any] = {"tool": self.tool, "caller": self.caller, "duration_ms": round(seconds * 1000, 2),
                                  "outcome": outcome}
        if self._trail:
            fields["engine_status"] = self._trail
        if outcome == "ok":
            fields["event"] = "mcp_tool_success"
            fields["result_count"] = result_count if result_count is not None else 1
        else:
            fields["event"] = "mcp_tool_error"
            fields["code"] = outcome
        pending = _fields.get()
        if pending is not None:
            pending.update(fields)  # the HTTP middleware writes it, with the status, as the request's one line
        elif outcome == "ok":
            logger.info("mcp_tool_success", extra={"fields": fields})
        else:
            logger.warning("mcp_tool_error", extra={"fields": fields})
        return seconds


class AccessLog:
    """ASGI middleware: a request id for every log line a request causes (echoed as X-Request-Id),
    and the request's one access line when it ends."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        offered = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"x-request-id"), None)
        rid = request_id.new(offered)
        request_id.current.set(rid)
        fields: dict[str, Any] = {}
        _fields.set(fields)
        started = time.perf_counter()
        status = [0]

        async def send_with_id(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(message)

        try:
            await self._app(scope, receive, send_with_id)
        finally:
            event = str(fields.setdefault("event", "http_request"))
            fields.update(
                method=scope.get("method"),
                path=scope.get("path"),
                status=status[0],
                client=(scope.get("client") or ("", 0))[0],
            )
            principal = scope.get(SCOPE_KEY)
            if isinstance(principal, Principal):
                fields.setdefault("caller", principal.name)  # never the token: its name, or a JWT's subject
            fields["request_ms" if "duration_ms" in fields else "duration_ms"] = round((time.perf_counter() - started) * 1000, 2)
            logger.log(logging.WARNING if event == "mcp_tool_error" else logging.INFO, event, extra={"fields": fields})
