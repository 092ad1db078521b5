"""The principal behind an MCP request: what the HTTP door put in the ASGI scope; stdio and in-process
requests have no scope and are the local user."""

from __future__ import annotations

from typing import Any

from mcp.server.context import ServerRequestContext

from kb_bridge.auth.principal import Principal, principal_of


def request_principal(ctx: ServerRequestContext[Any, Any]) -> Principal:
    scope = getattr(ctx.request, "scope", None)
    return principal_of(scope if isinstance(scope, dict) else None)
