"""Concurrency and throughput, measured with wrk (a C load generator, so the client is not what is
measured):

1. 64 concurrent clients calling kb_search on kb-bridge (gunicorn, 2 workers, 64 pool threads each)
   against an engine stand-in that answers after 100 ms: achieved calls/s against the ideal
   (64 / 0.1 s = 640/s), errors, latency percentiles.
2. Throughput of a trivial tool (kb_echo, no engine) at concurrency 1, 4, 16 and 64, kb-bridge
   (gunicorn, 2 workers) as shipped and "lean" (access log and metrics off, as the reference has
   neither) against the SDK's MCPServer reference (uvicorn, 2 workers), taking turns.

    python bench/concurrency.py [--seconds 15] [--levels 1,4,16,64]

Needs wrk (Debian package `wrk`). Starts and stops every server itself, on loopback.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from common import BENCH, MODERN_META, progress, start_bridge, wait_until, write_result
from overhead import start_reference
from kb_bridge.testing.standin import StandInEngine

TOKEN = "bench-token-0123456789abcdef"

LUA = """
wrk.method = "POST"
wrk.body = [[%(body)s]]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["Authorization"] = "Bearer %(token)s"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "tools/call"
wrk.headers["Mcp-Name"] = "%(tool)s"
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) errors = 0 end
function response(status, headers, body)
  if status ~= 200 or string.find(body, '"isError":true', 1, true) then errors = errors + 1 end
end
function done(summary, latency, requests)
  local e = 0
  for _, t in ipairs(threads) do e = e + t:get("errors") end
  local s = summary.errors
  io.write(string.format('RESULT {"requests":%%d,"duration_us":%%d,"errors":%%d,"socket_errors":%%d,"p50_ms":%%.3f,"p95_ms":%%.3f,"p99_ms":%%.3f}\\n',
    summary.requests, summary.duration, e, s.connect + s.read + s.write + s.timeout,
    latency:percentile(50) / 1000, latency:percentile(95) / 1000, latency:percentile(99) / 1000))
end
"""


def wrk(url: str, tool: str, arguments: dict[str, Any], connections: int, seconds: int, tmp: Path) -> dict[str, Any]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments, "_meta": MODERN_META}})
    script = tmp / f"{tool}-{connections}.lua"
    script.write_text(LUA % {"body": body, "token": TOKEN, "tool": tool})
    threads = 1 if connections == 1 else 2
    done = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "-s", str(script), url + "/mcp"],
                          capture_output=True, text=True, timeout=seconds + 60)
    line = next((row for row in done.stdout.splitlines() if row.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"wrk failed: {done.stdout}\n{done.stderr}")
    result = json.loads(line[7:])
    result["calls_per_s"] = round(result["requests"] / (result["duration_us"] / 1e6), 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--levels", default="1,4,16,64")
    parser.add_argument("--repeats", type=int, default=2, help="runs per level and server, alternating")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    levels = [int(x) for x in args.levels.split(",")]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with StandInEngine(delay=0.1) as engine:
            (tmp / "slow").mkdir()
            bridge = start_bridge(tmp / "slow", {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN}, workers=2)
            try:
                progress("64 clients, engine answering after 100 ms …")
                wrk(bridge.url, "kb_search", {"query": "warm-up"}, 64, 3, tmp)
                # Calls wrk abandoned at the end of the warm-up still finish on the server: let them,
                # so the peak below counts only the measured run.
                wait_until(lambda: engine.in_flight == 0, 30, what="the warm-up's calls to finish")
                engine.peak_in_flight = 0
                slow = wrk(bridge.url, "kb_search", {"query": "concurrency"}, 64, args.seconds, tmp)
            finally:
                bridge.stop()
            slow["ideal_calls_per_s"] = 640.0
            slow["efficiency"] = round(slow["calls_per_s"] / 640.0, 3)
            slow["engine_peak_in_flight"] = engine.peak_in_flight
            results["slow_engine_64"] = slow
        with StandInEngine() as engine:
            (tmp / "fast").mkdir()
            env = {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN}
            bridge = start_bridge(tmp / "fast", env, workers=2, app="bench_apps:bridge_app()", pythonpath=BENCH)
            (tmp / "lean").mkdir()
            lean = start_bridge(tmp / "lean", {**env, "KB_LOG_LEVEL": "WARNING", "KB_METRICS": "false"}, workers=2,
                                app="bench_apps:bridge_app()", pythonpath=BENCH)
            reference = start_reference(tmp, engine.url)
            try:
                # kb-bridge as shipped (a JSON access line per request, metrics on), kb-bridge with
                # both off (the reference writes no access log and keeps no metrics), MCPServer.
                servers = {"kb-bridge": bridge.url, "kb-bridge lean": lean.url, "MCPServer": reference.url}
                for url in servers.values():
                    wrk(url, "kb_echo", {"text": "warm-up"}, 16, 3, tmp)
                throughput: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in servers}
                for level in levels:
                    for repeat in range(args.repeats):
                        names = list(servers)
                        order = names[repeat % len(names):] + names[:repeat % len(names)]  # rotate who goes first
                        for name in order:
                            progress(f"kb_echo, {level} connection(s), {name}, run {repeat + 1}/{args.repeats}")
                            throughput[name].setdefault(str(level), []).append(wrk(servers[name], "kb_echo", {"text": "hi"}, level, args.seconds, tmp))
            finally:
                bridge.stop()
                lean.stop()
                reference.stop()
        results["echo_throughput"] = throughput
    report(results)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def report(results: dict[str, Any]) -> None:
    slow = results["slow_engine_64"]
    print("\n64 concurrent clients, kb_search, engine answering after 100 ms (kb-bridge: 2 workers, 64 pool threads each)")
    print(f"  calls/s {slow['calls_per_s']} of ideal 640 -> efficiency {slow['efficiency']:.0%}; errors {slow['errors'] + slow['socket_errors']};"
          f" p50 {slow['p50_ms']} ms, p95 {slow['p95_ms']} ms, p99 {slow['p99_ms']} ms; engine saw up to {slow['engine_peak_in_flight']} at once")
    print("\nkb_echo throughput (calls/s, median of runs), 2 worker processes each")
    print(f"{'connections':>11} {'kb-bridge':>10} {'lean':>8} {'MCPServer':>10} {'ratio':>7} {'lean ratio':>10}"
          f" {'kb-bridge p99':>14} {'MCPServer p99':>14}")
    summary = {}
    runs = results["echo_throughput"]
    for level in runs["kb-bridge"]:
        calls = {name: median([r["calls_per_s"] for r in runs[name][level]]) for name in runs}
        p99 = {name: median([r["p99_ms"] for r in runs[name][level]]) for name in runs}
        ratio = calls["kb-bridge"] / calls["MCPServer"]
        lean_ratio = calls["kb-bridge lean"] / calls["MCPServer"]
        summary[level] = {**calls, "ratio": round(ratio, 3), "lean ratio": round(lean_ratio, 3)}
        print(f"{level:>11} {calls['kb-bridge']:>10.1f} {calls['kb-bridge lean']:>8.1f} {calls['MCPServer']:>10.1f} {ratio:>7.2f}"
              f" {lean_ratio:>10.2f} {p99['kb-bridge']:>13.2f}ms {p99['MCPServer']:>13.2f}ms")
    results["echo_summary"] = summary
    path = write_result("concurrency", results)
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
