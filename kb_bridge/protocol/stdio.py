"""The stdio transport (Claude Desktop and other local clients): JSON-RPC on stdin/stdout.

Nothing else may reach stdout: logging is configured to stderr before this runs, the handlers never print, and
while the bridge serves, fd 1 itself is stderr (protocol/stdio_wire.py). The transport (protocol/stdio_transport.py)
answers every request it reads, even after stdin ends, within the longest a tool call may take.
"""

from __future__ import annotations

import anyio

from kb_bridge.protocol import stdio_wire
from kb_bridge.protocol.server import build_server
from kb_bridge.protocol.stdio_transport import StdoutClosed, stdio_transport
from kb_bridge.runtime import Bridge
from kb_bridge.settings import Settings

__all__ = ["StdoutClosed", "run_stdio", "serve_stdio"]

# Beyond the engine work Settings.longest_tool_call bounds: the answer's rendering and its way back from the pool.
ANSWER_SLACK = 5.0


async def serve_stdio(settings: Settings) -> None:
    server = build_server(Bridge(settings))
    with stdio_wire.claimed() as wire:
        drain = settings.longest_tool_call() + ANSWER_SLACK
        async with stdio_transport(wire, drain, settings.mcp.max_body_bytes) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


def run_stdio(settings: Settings) -> None:
    """Serve until stdin ends and every request read is answered; StdoutClosed if the client closed stdout."""
    anyio.run(serve_stdio, settings)
