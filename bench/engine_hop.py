"""What one engine call costs the bridge, by layer: the same full-text search sent to the local
engine with the standard library's http.client (one keep-alive connection, the floor of an HTTP
call from Python), with a requests Session, and with kb-bridge's EngineClient (requests + the
tenacity retry policy + error translation + the response cap). Interleaved per query, so machine
noise hits all three alike. The differences are client-side CPU per engine call.

    python bench/engine_hop.py [--rounds 1000] [--docs 1000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from common import progress, summary_ms, write_result
from overhead import ENGINE_KEY, claims, start_indexed_engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--docs", type=int, default=1000)
    args = parser.parse_args()
    queries = claims(args.rounds + args.warmup)
    with tempfile.TemporaryDirectory() as tmp_name:
        engine = start_indexed_engine(Path(tmp_name), args.docs)
        try:
            samples = measure(engine.url, queries, args.warmup)
        finally:
            engine.stop()
    stats = {name: summary_ms(values) for name, values in samples.items()}
    floor = stats["http.client"]["p50"]
    print(f"\none engine search (full-text, top 10), {args.rounds} rounds, interleaved")
    print(f"{'client':<28} {'p50 ms':>8} {'p95 ms':>8} {'p50 over http.client':>22}")
    for name, row in stats.items():
        print(f"{name:<28} {row['p50']:>8.3f} {row['p95']:>8.3f} {row['p50'] - floor:>+22.3f}")
    path = write_result("engine-hop", {"rounds": args.rounds, "docs": args.docs, "stats": stats})
    print(f"\nwritten to {path}")


def measure(url: str, queries: list[str], warmup: int) -> dict[str, list[float]]:
    # Settings are read from the environment, as in the bridge; set before the client is built.
    os.environ.update({"KB_ENGINE_URL": url, "KB_API_KEY": ENGINE_KEY})
    from kb_bridge.client.engine import EngineClient
    from kb_bridge.settings import load_settings

    bridge_client = EngineClient(load_settings().engine)
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {ENGINE_KEY}"
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port)

    def stdlib(query: str) -> Any:
        body = json.dumps({"query": query, "top_n": 10, "fts_only": True})
        connection.request("POST", "/api/v1/search", body, {"Authorization": f"Bearer {ENGINE_KEY}", "Content-Type": "application/json"})
        return json.loads(connection.getresponse().read())

    targets: dict[str, Callable[[str], Any]] = {
        "http.client": stdlib,
        "requests.Session": lambda q: session.post(f"{url}/api/v1/search", json={"query": q, "top_n": 10, "fts_only": True}, timeout=30).json(),
        "kb-bridge EngineClient": lambda q: bridge_client.search({"query": q, "top_n": 10, "fts_only": True}),
    }
    samples: dict[str, list[float]] = {name: [] for name in targets}
    order = list(targets)
    for round_number, query in enumerate(queries):
        random.shuffle(order)
        for name in order:
            started = time.perf_counter()
            targets[name](query)
            if round_number >= warmup:
                samples[name].append(time.perf_counter() - started)
        if round_number % 200 == 0:
            progress(f"round {round_number}/{len(queries)}")
    bridge_client.close()
    return samples


if __name__ == "__main__":
    main()
