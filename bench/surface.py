"""Tool surface: the size of tools/list, per tool and in total, in the full and the read-only
configuration (agents pay for it in tokens; tokens ≈ characters / 4).

    python bench/surface.py
"""

from __future__ import annotations

import json

from common import write_result

from kb_bridge.tools import registry as tools
from kb_bridge.protocol.results import to_mcp_tool
from kb_bridge.settings import McpSettings


def listing(settings: McpSettings) -> list[dict[str, object]]:
    return [to_mcp_tool(spec).model_dump(by_alias=True, mode="json", exclude_none=True) for spec in tools.select(settings)]


def main() -> None:
    results = {}
    for name, settings in {"full": McpSettings(), "read-only": McpSettings(read_only=True)}.items():
        listed = listing(settings)
        per_tool = {str(t["name"]): len(json.dumps(t)) for t in listed}
        total = len(json.dumps({"tools": listed}))
        results[name] = {"tools": len(listed), "chars": total, "tokens_approx": total // 4, "per_tool_chars": per_tool}
    print(f"{'configuration':<14} {'tools':>5} {'chars':>7} {'≈ tokens':>9}")
    for name, r in results.items():
        print(f"{name:<14} {r['tools']:>5} {r['chars']:>7} {r['tokens_approx']:>9}")
    print("\nper tool (full):")
    for tool, chars in results["full"]["per_tool_chars"].items():
        print(f"  {tool:<18} {chars:>6} chars  ≈ {chars // 4:>4} tokens")
    print(f"\nwritten to {write_result('surface', results)}")


if __name__ == "__main__":
    main()
