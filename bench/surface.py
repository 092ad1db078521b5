"""Tool surface: the size of tools/list, per tool and in total, in the full and the read-only
configuration (agents pay for it in tokens; tokens ≈ characters / 4), and beside it the tools/list of any
other MCP server started over stdio (`--peer NAME=COMMAND`), measured the same way through the official client.

    python bench/surface.py [--peer "server-memory=node .../server-memory/dist/index.js"]
"""

from __future__ import annotations

import argparse
import json
import shlex

from common import write_result

from kb_bridge.tools import registry as tools
from kb_bridge.protocol.results import to_mcp_tool
from kb_bridge.settings import McpSettings


def listing(settings: McpSettings) -> list[dict[str, object]]:
    return [to_mcp_tool(spec).model_dump(by_alias=True, mode="json", exclude_none=True) for spec in tools.select(settings)]


def peer_listing(command: str) -> list[dict[str, object]]:
    """The tools/list of an MCP server run as `command` over stdio (its whole answer, all pages)."""
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    argv = shlex.split(command)

    async def listed() -> list[dict[str, object]]:
        async with Client(StdioServerParameters(command=argv[0], args=argv[1:]), mode="legacy") as client:
            tools, cursor = [], None
            while True:
                page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
                tools += [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in page.tools]
                cursor = page.next_cursor
                if not cursor:
                    return tools

    return anyio.run(listed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", action="append", default=[], metavar="NAME=COMMAND",
                        help="also measure this stdio MCP server's tools/list")
    args = parser.parse_args()
    results = {}
    for name, settings in {"full": McpSettings(), "read-only": McpSettings(read_only=True)}.items():
        listed = listing(settings)
        per_tool = {str(t["name"]): len(json.dumps(t)) for t in listed}
        total = len(json.dumps({"tools": listed}))
        results[name] = {"tools": len(listed), "chars": total, "tokens_approx": total // 4, "per_tool_chars": per_tool}
    for peer in args.peer:
        name, _, command = peer.partition("=")
        listed = peer_listing(command)
        total = len(json.dumps({"tools": listed}))
        results[f"peer {name}"] = {"tools": len(listed), "chars": total, "tokens_approx": total // 4,
                                   "per_tool_chars": {str(t["name"]): len(json.dumps(t)) for t in listed}}
    print(f"{'configuration':<24} {'tools':>5} {'chars':>7} {'≈ tokens':>9}")
    for name, r in results.items():
        print(f"{name:<24} {r['tools']:>5} {r['chars']:>7} {r['tokens_approx']:>9}")
    print("\nper tool (full):")
    for tool, chars in results["full"]["per_tool_chars"].items():
        print(f"  {tool:<18} {chars:>6} chars  ≈ {chars // 4:>4} tokens")
    print(f"\nwritten to {write_result('surface', results)}")


if __name__ == "__main__":
    main()
