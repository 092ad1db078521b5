"""What the bridge costs: kb_search through kb-bridge against the same query sent straight to the
engine, and against the same tool built with the SDK's MCPServer under uvicorn; plus a trivial
tool with no engine call, to isolate the MCP layer. All targets are called in one run,
interleaved (a shuffled round of every target per query), so machine noise hits them alike.

    python bench/overhead.py [--rounds 600] [--docs 1000]

Servers, all on loopback and started here: the local engine (full-text only, so its own latency
is small and steady: the overhead is what is measured), kb-bridge under gunicorn (2 workers,
stateless Streamable HTTP, bearer auth, default logging), the MCPServer reference under uvicorn
(2 workers, stateless, JSON responses, the SDK's bearer auth). Clients are raw HTTP on keep-alive
connections, so client libraries are not what is measured.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from common import (
    BENCH,
    SCIFACT,
    McpHttp,
    Service,
    free_port,
    progress,
    start_bridge,
    start_engine,
    summary_ms,
    write_result,
)
from kb_bridge.testing.engine_http import engine_idle
from kb_bridge.testing.processes import clean_env

TOKEN = "bench-token-0123456789abcdef"
ENGINE_KEY = "bench-engine-key-0123456789"


class LegacyMcpHttp(McpHttp):
    """The handshake era (2025-11-25), stateless: initialize once, then one POST per call, whose
    answer may come as a one-event SSE stream."""

    def __init__(self, url: str, token: str | None = None) -> None:
        super().__init__(url, token)
        self.session.headers["MCP-Protocol-Version"] = "2025-11-25"
        del self.session.headers["Mcp-Method"]
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "kb-bench", "version": "1"}}}
        _read(self.session.post(self.url, data=json.dumps(init), timeout=30))
        self.session.post(self.url, data=json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), timeout=30)

    def call(self, tool: str, arguments: dict[str, Any], raw_arguments: str | None = None) -> dict[str, Any]:
        self._id += 1
        body = {"jsonrpc": "2.0", "id": self._id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
        reply = _read(self.session.post(self.url, data=json.dumps(body), timeout=60))
        result = reply.get("result")
        if result is None or result.get("isError"):
            raise RuntimeError(f"{tool} failed: {json.dumps(reply)[:300]}")
        return dict(result.get("structuredContent") or {})


def _read(response: requests.Response) -> dict[str, Any]:
    response.raise_for_status()
    if response.headers.get("Content-Type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return dict(json.loads(data[-1]))
    return dict(response.json())


def claims(count: int) -> list[str]:
    with open(SCIFACT / "queries.jsonl") as f:
        return [json.loads(line)["text"] for line in f][:count]


def load_corpus(engine: Service, docs: int) -> None:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {ENGINE_KEY}"
    with open(SCIFACT / "corpus.jsonl") as f:
        rows = [json.loads(line) for _, line in zip(range(docs), f, strict=False)]
    for row in rows:
        body = {"text": row["text"], "title": row["title"], "source_path": f"scifact/{row['_id']}", "tags": ["collection:documents"]}
        session.post(f"{engine.url}/api/v1/jobs", json=body, headers={"Idempotency-Key": f"bench-{row['_id']}"}, timeout=30).raise_for_status()

    from common import wait_until

    wait_until(lambda: engine_idle(engine.url, ENGINE_KEY), 600, interval=0.5, what="the engine to index the corpus")


def start_reference(tmp: Path, engine_url: str) -> Service:
    port = free_port()
    env = clean_env({"KB_ENGINE_URL": engine_url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_API_KEY": TOKEN, "KB_BIND": f"127.0.0.1:{port}"})
    argv = [sys.executable, "-m", "uvicorn", "bench_apps:reference_app", "--factory", "--app-dir", BENCH, "--workers", "2",
            "--host", "127.0.0.1", "--port", str(port), "--no-access-log", "--log-level", "warning"]
    service = Service("MCPServer reference", argv, env, tmp / "reference.log", f"http://127.0.0.1:{port}")
    from common import wait_until

    def ready() -> bool:
        try:
            return requests.post(service.url + "/mcp", timeout=1).status_code in (400, 401, 406, 415)
        except requests.RequestException:
            return False

    wait_until(ready, 60, what="the reference server")
    return service


def start_indexed_engine(tmp: Path, docs: int) -> Service:
    """The local engine, full-text only (its own latency small and steady), holding `docs` SciFact
    abstracts; stopped again if indexing fails."""
    engine = start_engine(tmp, tmp / "engine", env={"KB_API_KEY": ENGINE_KEY, "KB_ENGINE_EMBEDDER": "none"})
    try:
        progress(f"indexing {docs} SciFact abstracts …")
        load_corpus(engine, docs)
    except BaseException:
        engine.stop()
        raise
    return engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=600)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--docs", type=int, default=1000)
    args = parser.parse_args()
    queries = claims(args.rounds + args.warmup)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        engine = start_indexed_engine(tmp, args.docs)
        services: list[Service] = [engine]
        try:
            env = {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_API_KEY": TOKEN}
            bridge = start_bridge(tmp, env, workers=2, app="bench_apps:bridge_app()", pythonpath=BENCH)
            services.append(bridge)
            # The same bridge without its per-request logging and metrics: what they cost, and a
            # like-for-like comparison with the reference, which has neither.
            (tmp / "lean").mkdir()
            lean = start_bridge(tmp / "lean", {**env, "KB_LOG_LEVEL": "WARNING", "KB_METRICS": "false"}, workers=2,
                                app="bench_apps:bridge_app()", pythonpath=BENCH)
            services.append(lean)
            reference = start_reference(tmp, engine.url)
            services.append(reference)
            direct = requests.Session()
            direct.headers["Authorization"] = f"Bearer {ENGINE_KEY}"
            clients = {
                "bridge": McpHttp(bridge.url, TOKEN), "bridge-legacy": LegacyMcpHttp(bridge.url, TOKEN),
                "bridge-lean": McpHttp(lean.url, TOKEN),
                "reference": McpHttp(reference.url, TOKEN), "reference-legacy": LegacyMcpHttp(reference.url, TOKEN),
            }
            search = {"fts_only": True, "top": 10}
            targets: dict[str, Callable[[str], Any]] = {
                "engine direct": lambda q: direct.post(f"{engine.url}/api/v1/search", json={"query": q, "top_n": 10, "fts_only": True}, timeout=30).raise_for_status(),
                **{f"kb_search {name}": (lambda c: lambda q: c.call("kb_search", {"query": q, **search}))(client) for name, client in clients.items()},
                **{f"kb_echo {name}": (lambda c: lambda q: c.call("kb_echo", {"text": q[:100]}))(client) for name, client in clients.items()},
            }
            samples: dict[str, list[float]] = {name: [] for name in targets}
            order = list(targets)
            for round_number, query in enumerate(queries):
                random.shuffle(order)
                for name in order:
                    started = time.perf_counter()
                    targets[name](query)
                    if round_number >= args.warmup:
                        samples[name].append(time.perf_counter() - started)
                if round_number % 100 == 0:
                    progress(f"round {round_number}/{len(queries)}")
        finally:
            for service in reversed(services):
                service.stop()
    report(samples, args)


def report(samples: dict[str, list[float]], args: argparse.Namespace) -> None:
    stats = {name: summary_ms(values) for name, values in samples.items()}
    base = stats["engine direct"]["p50"]
    print(f"\nkb_search (full-text, 1 client, interleaved, {args.rounds} rounds) and kb_echo (no engine call)")
    print(f"{'target':<28} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'p50 over engine':>16}")
    for name, s in stats.items():
        over = "" if name == "engine direct" or name.startswith("kb_echo") else f"{s['p50'] - base:+.2f}"
        print(f"{name:<28} {s['p50']:>8.2f} {s['p95']:>8.2f} {s['p99']:>8.2f} {over:>16}")
    ratios = {}
    for era in ("", "-legacy"):
        bridge_over = stats[f"kb_search bridge{era}"]["p50"] - base
        reference_over = stats[f"kb_search reference{era}"]["p50"] - base
        ratios[f"search overhead ratio{era or ' (2026-07-28)'}"] = round(bridge_over / reference_over, 3)
        ratios[f"echo p50 ratio{era or ' (2026-07-28)'}"] = round(stats[f"kb_echo bridge{era}"]["p50"] / stats[f"kb_echo reference{era}"]["p50"], 3)
    lean_over = stats["kb_search bridge-lean"]["p50"] - base
    ratios["search overhead ratio, logs and metrics off (2026-07-28)"] = round(lean_over / (stats["kb_search reference"]["p50"] - base), 3)
    ratios["echo p50 ratio, logs and metrics off (2026-07-28)"] = round(stats["kb_echo bridge-lean"]["p50"] / stats["kb_echo reference"]["p50"], 3)
    print()
    for name, value in ratios.items():
        print(f"{name:<40} {value:>6}  (kb-bridge / MCPServer; ≤ 1.0 means kb-bridge costs less)")
    path = write_result("overhead", {"rounds": args.rounds, "docs": args.docs, "stats": stats, "ratios": ratios,
                                     "samples_ms": {k: [round(v * 1000, 3) for v in vs] for k, vs in samples.items()}})
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
