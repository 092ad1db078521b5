"""The ASGI apps the benchmarks serve, built from the environment like the real ones.

- `bridge_app()`: kb-bridge exactly as shipped, plus one trivial tool (`kb_echo`, no engine) to
  isolate the MCP layer. Served by gunicorn with gunicorn.conf.py.
- `reference_app()`: the standard way to build the same server with the SDK, its high-level
  `MCPServer` (stateless, JSON responses, bearer auth through the SDK's own middleware), with the
  same two tools over the same EngineClient. Served by uvicorn.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

from kb_bridge import shapes
from kb_bridge.tools import registry as tools
from kb_bridge.client.engine import EngineClient
from kb_bridge.protocol.app import BridgeApp, create_app
from kb_bridge.settings import load_settings
from kb_bridge.tools import arguments as a
from kb_bridge.tools import search
from kb_bridge.tools.spec import Result, ToolContext, ToolSpec

ECHO_DESCRIPTION = "Return the text given (benchmark tool: no engine call)."


@dataclass(frozen=True, kw_only=True)
class EchoArguments:
    text: str = a.field({"type": "string", "maxLength": 1000})


def _echo(ctx: ToolContext, args: EchoArguments) -> Result:
    return {"text": args.text}


ECHO = ToolSpec(
    name="kb_echo",
    description=ECHO_DESCRIPTION,
    arguments=EchoArguments,
    output_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    handler=_echo,
    render=lambda result: result["text"],
    read_only=True,
    idempotent=True,
)


def bridge_app() -> BridgeApp:
    return create_app(available=(*tools.ALL_TOOLS, ECHO))


def reference_app() -> Any:
    from mcp.server import MCPServer
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings

    settings = load_settings()
    engine = EngineClient(settings.engine)
    key = settings.mcp.api_keys[0].reveal() if settings.mcp.api_keys else ""
    host, _, port = settings.server.bind.rpartition(":")

    class StaticToken:
        async def verify_token(self, token: str) -> AccessToken | None:
            if key and hmac.compare_digest(token.encode(), key.encode()):
                return AccessToken(token=token, client_id="bench", scopes=[])
            return None

    server = MCPServer(
        "reference",
        token_verifier=StaticToken(),
        auth=AuthSettings(issuer_url=f"http://{host}:{port}", resource_server_url=f"http://{host}:{port}/mcp", required_scopes=[]),
        log_level="WARNING",
    )

    @server.tool()
    def kb_search(query: str, top: int = 10, fts_only: bool = False) -> dict[str, Any]:
        """Search the knowledge base."""
        arguments = search.SearchArguments(query=query, top=top, fts_only=True if fts_only else None)
        raw = engine.search(search.engine_request(arguments))
        return {"query": query, "mode": raw.get("mode"), "results": [shapes.chunk(hit) for hit in shapes.listed(raw, "results")]}

    @server.tool()
    def kb_echo(text: str) -> dict[str, str]:
        """Return the text given (benchmark tool: no engine call)."""
        return {"text": text}

    return server.streamable_http_app(stateless_http=True, json_response=True, host=host)
