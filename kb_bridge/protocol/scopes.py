"""Which OAuth scope an MCP request needs, read from its JSON-RPC message before the server sees it, so a
token without it gets HTTP 403 with a step-up challenge (auth/bearer.py) and nothing reaches the engine.

tools/call needs the tool's own scope (ToolSpec.scope); reading resources needs kb:read; the handshake,
ping, tools/list (which shows only the tools the token may call), prompts and notifications need none.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kb_bridge.credentials.scopes import READ
from kb_bridge.tools.spec import ToolSpec

_BY_METHOD = {
    "resources/list": READ,
    "resources/templates/list": READ,
    "resources/read": READ,
    "resources/subscribe": READ,
    "completion/complete": READ,
}


class ScopeRules:
    def __init__(self, specs: Iterable[ToolSpec]) -> None:
        self._tools = {spec.name: spec.scope for spec in specs}

    def needed(self, message: dict[str, Any]) -> tuple[str, str] | None:
        """(scope, what needs it) for one JSON-RPC message (envelope.py has parsed and checked it), or None."""
        method = message.get("method")
        if method == "tools/call":
            params = message.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            scope = self._tools.get(name) if isinstance(name, str) else None
            return (scope, f"tool {name}") if scope is not None else None
        if isinstance(method, str) and method in _BY_METHOD:
            return _BY_METHOD[method], method
        return None
