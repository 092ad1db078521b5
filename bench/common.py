"""Shared pieces of the benchmarks: processes on loopback, raw MCP calls, statistics, output."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests

from kb_bridge.local_engine.config import EngineConfig
from kb_bridge.testing.processes import Service, free_port, start_bridge, start_engine, wait_until, worker_pids  # noqa: F401

REPO = Path(__file__).resolve().parents[1]

RESULTS = REPO / "bench" / "results"
# SciFact (BEIR format: corpus.jsonl, queries.jsonl, qrels/train.tsv), where the machines the figures in
# docs/benchmarks.md came from keep it, beside the checkout; any BEIR directory works (--corpus DIR).
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
BENCH = str(REPO / "bench")
MODERN = "2026-07-28"
# Texts per embed_documents call, as the ingestion worker sends them by default (KB_ENGINE_EMBED_BATCH).
WORKER_BATCH = EngineConfig.embed_batch_size
MODERN_META = META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "kb-bench", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def machine() -> dict[str, Any]:
    """What the figures were measured on, with the load average: the machine may be shared."""
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "sqlite": sqlite3.sqlite_version,
            "load_average": [round(load, 2) for load in os.getloadavg()]}


class EngineApi:
    """The local engine's HTTP API on one keep-alive session, so that latency measures the engine."""

    def __init__(self, url: str) -> None:
        self.base = url.rstrip("/") + "/api/v1"
        self.http = requests.Session()

    def get(self, path: str) -> dict[str, Any]:
        response = self.http.get(self.base + path, timeout=60)
        response.raise_for_status()
        return dict(response.json())

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post(self.base + path, json=body, timeout=60)
        response.raise_for_status()
        return dict(response.json())


def load_beir(directory: Path) -> tuple[list[dict[str, str]], dict[str, str]]:
    """A BEIR directory's corpus (`_id`, `title`, `text` per document) and queries (id to text)."""
    corpus_path, queries_path = directory / "corpus.jsonl", directory / "queries.jsonl"
    if not corpus_path.is_file():
        raise SystemExit(f"no corpus at {corpus_path}; pass --corpus DIR (BEIR format)")
    with open(corpus_path, encoding="utf-8") as handle:
        corpus = [json.loads(line) for line in handle]
    with open(queries_path, encoding="utf-8") as handle:
        queries = {str(row["_id"]): str(row["text"]) for row in map(json.loads, handle)}
    return corpus, queries


class McpHttp:
    """Single-POST tool calls in the 2026-07-28 era over one keep-alive session: the cheapest
    correct client, so the figures measure the server, not a client library."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url + "/mcp"
        self.session = requests.Session()
        self.session.headers.update({"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                                     "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call"})
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self._id = 0

    def call(self, tool: str, arguments: dict[str, Any], raw_arguments: str | None = None) -> dict[str, Any]:
        """Call `tool`; `raw_arguments` is the arguments object already serialised (large payloads)."""
        self._id += 1
        if raw_arguments is None:
            raw_arguments = json.dumps(arguments)
        body = (
            f'{{"jsonrpc": "2.0", "id": {self._id}, "method": "tools/call", '
            f'"params": {{"name": {json.dumps(tool)}, "_meta": {json.dumps(META)}, "arguments": {raw_arguments}}}}}'
        )
        response = self.session.post(self.url, data=body.encode(), headers={"Mcp-Name": tool}, timeout=600)
        response.raise_for_status()
        reply = response.json()
        result = reply.get("result")
        if result is None or result.get("isError"):
            raise RuntimeError(f"{tool} failed: {json.dumps(reply)[:500]}")
        return dict(result["structuredContent"])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def summary_ms(seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {"n": len(ms), "p50": round(percentile(ms, 0.5), 3), "p95": round(percentile(ms, 0.95), 3),
            "p99": round(percentile(ms, 0.99), 3), "mean": round(statistics.fmean(ms), 3) if ms else float("nan")}


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2))
    return path


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def add_engine_options(parser: argparse.ArgumentParser, holds: str, example: str) -> None:
    """--data, --keep and --set: where the engine of a benchmark keeps its store, and its settings."""
    parser.add_argument("--data", type=Path,
                        help=f"engine data directory; one that already holds {holds} is not filled again")
    parser.add_argument("--keep", action="store_true", help="keep the data directory (default: a temporary one)")
    parser.add_argument("--set", action="append", default=[], metavar="VAR=VALUE",
                        help=f"engine environment variable, e.g. {example} (repeatable)")


def engine_env(settings: list[str]) -> dict[str, str]:
    """The environment of a benchmark's engine: the bundled model, loaded before it answers, then each --set."""
    env = {"KB_ENGINE_EMBEDDER": "minilm", "KB_ENGINE_WAIT_FOR_MODEL": "1"}
    for item in settings:
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise SystemExit(f"--set {item!r}: expected VAR=VALUE")
        env[name] = value
    return env


@contextmanager
def benchmark_engine(args: argparse.Namespace, env: dict[str, str], name: str) -> Iterator[Service]:
    """An engine on --data, or on a temporary store that is removed afterwards unless --keep (its log stays)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"kb-{name}-"))
    data_dir = args.data or workdir / "data"
    progress(f"engine data in {data_dir}, log in {workdir}")
    engine = start_engine(workdir, data_dir, env)
    try:
        yield engine
    finally:
        engine.stop()
        if not args.keep and args.data is None:
            shutil.rmtree(workdir / "data", ignore_errors=True)


def vm_hwm_kib(pid: int) -> int:
    """Peak resident set size of a process (VmHWM), KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def vm_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0
