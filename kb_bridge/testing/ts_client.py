"""The official TypeScript SDK client (tests/ts/client.mjs, its SDK pinned by tests/ts/package-lock.json) run on
a plan of steps: each step one client call, each output line one JSON result, for the tests to check."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb_bridge.testing.processes import REPO, require

TS = REPO / "tests" / "ts"


@dataclass
class Step:
    method: str
    args: dict[str, Any] = field(default_factory=dict)
    expect: str = "ok"  # "ok", an error code of an isError result, or "rpc" (a JSON-RPC error is right)
    field: str | None = None  # for VALIDATION_ERROR: the field the text must name

    def plan(self) -> dict[str, Any]:
        return {"method": self.method, **self.args}


def tool(name: str, arguments: dict[str, Any], expect: str = "ok", field: str | None = None) -> Step:
    return Step("callTool", {"name": name, "arguments": arguments}, expect, field)


def ensure_node() -> str:
    """node, with the pinned SDK installed from tests/ts/package-lock.json (npm ci) if it is not yet."""
    binary = require("node")
    if not (TS / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        npm = require("npm")
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefix", str(TS)], check=True, timeout=600,
                       capture_output=True)
    return binary


def run(node: str, transport: dict[str, Any], plan: list[Step], tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "plan.json"
    path.write_text(json.dumps({"transport": transport, "steps": [step.plan() for step in plan]}))
    done = subprocess.run([node, str(TS / "client.mjs"), str(path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # One line per step, split at "\n" only: JSON.stringify writes U+2028, U+2029 and U+0085 raw, which
    # str.splitlines would take for line ends inside a result holding them.
    return [json.loads(line) for line in done.stdout.split("\n") if line]
