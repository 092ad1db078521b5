"""Two engines side by side: another checkout's (before) and this one's (now), each on its own copy of a
store, queries taking turns. Not a test.

For a change that should not move search latency: both engines run at once on 127.0.0.1, and every SciFact
claim goes to both, in alternating order, per mode, after 10 warm-up queries each; medians and p95 of the
client's round trip. Machines here are shared and their speed drifts through the day, so a figure from
another run is no baseline; this one is.

Prepare the two stores first: a copy of a kept tier (`cp -r /tmp/scale/tier-1000000 /tmp/ab-before`), and a
checkout of the commit before (`git worktree add /tmp/wt-before <commit>`). A store that this checkout has
already migrated is refused by an older engine; docs/benchmarks.md says what was done for each comparison.

    python bench/engine_ab.py --before /tmp/wt-before --before-data /tmp/ab-before --data /tmp/scale/tier-1000000
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import requests

from common import SCIFACT, Service, load_beir, progress, start_engine, summary_ms, write_result
from ingestion import wait_drained

MODES = ("fts", "vector", "hybrid")
WARM_UP = 10


def start(name: str, data: Path, checkout: Path | None, workdir: Path) -> Service:
    """An engine on `data`, run from `checkout` (PYTHONPATH before the installed kb-bridge) or this one."""
    env = {"KB_ENGINE_EMBEDDER": "minilm"}
    if checkout is not None:
        env["PYTHONPATH"] = str(checkout.resolve())
    # Started outside the repository, so that `python -m` imports the checkout named, and given 30 minutes:
    # a store of another index layout rebuilds its text index first.
    return start_engine(workdir, data, env, name=name, cwd=workdir, timeout=1800)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="checkout of the engine to compare against")
    parser.add_argument("--before-data", type=Path, required=True, help="its copy of the store")
    parser.add_argument("--data", type=Path, required=True, help="this checkout's copy of the store")
    parser.add_argument("--queries", type=int, default=200, help="SciFact claims per mode (default 200)")
    parser.add_argument("--corpus", type=Path, default=SCIFACT, help="BEIR directory of the claims")
    args = parser.parse_args()
    _, claims = load_beir(args.corpus)
    queries = list(claims.values())[: args.queries]
    workdir = Path(os.environ.get("TMPDIR", "/tmp"))
    engines = {"before": start("before", args.before_data, args.before, workdir)}
    try:
        engines["now"] = start("now", args.data, None, workdir)
        sessions = {name: requests.Session() for name in engines}
        for name, engine in engines.items():
            wait_drained(sessions[name], engine.url, 1)

        def ask(name: str, query: str, mode: str) -> float:  # seconds
            started = time.perf_counter()
            response = sessions[name].post(engines[name].url + "/api/v1/search",
                                           json={"query": query, "mode": mode, "top_n": 10}, timeout=60)
            response.raise_for_status()
            return time.perf_counter() - started

        figures: dict[str, Any] = {}
        for mode in MODES:
            for query in queries[:WARM_UP]:
                for name in engines:
                    ask(name, query, mode)
            timings: dict[str, list[float]] = {name: [] for name in engines}
            for i, query in enumerate(queries):
                for name in (("before", "now") if i % 2 == 0 else ("now", "before")):
                    timings[name].append(ask(name, query, mode))
            figures[mode] = {name: summary_ms(v) for name, v in timings.items()}
            progress(f"{mode}: {figures[mode]}")
    finally:
        for engine in engines.values():
            engine.stop()
    path = write_result("engine-ab", {"before": str(args.before), "queries": len(queries), "figures": figures})
    print(f"{'mode':>7} {'before p50':>11} {'now p50':>8} {'before p95':>11} {'now p95':>8}")
    for mode, row in figures.items():
        print(f"{mode:>7} {row['before']['p50']:11.2f} {row['now']['p50']:8.2f} {row['before']['p95']:11.2f} "
              f"{row['now']['p95']:8.2f}")
    print(f"(written to {path})")


if __name__ == "__main__":
    main()
