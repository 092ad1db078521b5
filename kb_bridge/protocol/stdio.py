"""The stdio transport (Claude Desktop and other local clients): JSON-RPC on stdin/stdout.

Nothing else may reach stdout: logging is configured to stderr before this runs, and the
handlers never print.
"""

from __future__ import annotations

import anyio
from mcp.server.stdio import stdio_server

from kb_bridge.protocol.server import build_server
from kb_bridge.runtime import Bridge
from kb_bridge.settings import Settings


async def serve_stdio(settings: Settings) -> None:
    server = build_server(Bridge(settings))
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def run_stdio(settings: Settings) -> None:
    anyio.run(serve_stdio, settings)
