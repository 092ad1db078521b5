"""The engine dies under load: what agents see, and what ends up written.

    python bench/faults.py [--seconds 30]

A real local engine (full-text only) behind kb-bridge (gunicorn, 2 workers). Four writers add
notes and two readers search, all the time. After a third of the run the engine is SIGKILLed; a
third later it is started again on the same data. At the end every note's outcome (confirmed,
reported unavailable, reported unknown) is compared with what the engine holds.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any


from common import progress, start_bridge, start_engine, summary_ms, wait_until, write_result
from kb_bridge.testing.engine_http import documents_at, engine_idle
from kb_bridge.testing.mcp_http import error_code, modern_call

TOKEN = "bench-token-0123456789abcdef"
ENGINE_KEY = "bench-engine-key-0123456789"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    outcomes: dict[str, str] = {}
    reads: list[tuple[float, float, str]] = []  # (started, seconds, outcome)
    lock = threading.Lock()
    stop = threading.Event()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        env = {"KB_API_KEY": ENGINE_KEY, "KB_ENGINE_EMBEDDER": "none"}
        from kb_bridge.testing.processes import free_port

        port = free_port()
        engine = start_engine(tmp, tmp / "data", env=env, port=port)
        bridge = start_bridge(tmp, {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_API_KEY": TOKEN,
                                    "KB_ENGINE_TIMEOUT": "2", "KB_ENGINE_RETRIES": "2"}, workers=2)

        def code(reply: dict[str, Any]) -> str:
            return error_code(reply) or "ok"

        def writer(number: int) -> None:
            n = 0
            while not stop.is_set():
                marker = f"faults/w{number}-{n}"
                n += 1
                outcome = code(modern_call(bridge.url, TOKEN, "kb_addnote", {"text": f"note {marker}", "source_path": marker}, timeout=60))
                with lock:
                    outcomes[marker] = outcome

        def reader() -> None:
            while not stop.is_set():
                started = time.monotonic()
                outcome = code(modern_call(bridge.url, TOKEN, "kb_search", {"query": "note"}, timeout=60))
                with lock:
                    reads.append((started, time.monotonic() - started, outcome))

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)] + [threading.Thread(target=reader) for _ in range(2)]
        begun = time.monotonic()
        try:
            for thread in threads:
                thread.start()
            time.sleep(args.seconds / 3)  # the load runs for a while: this is the experiment's schedule
            progress("killing the engine …")
            killed_at = time.monotonic()
            os.killpg(engine.process.pid, signal.SIGKILL)
            engine.process.wait(10)
            engine.stop()
            time.sleep(args.seconds / 3)
            progress("starting the engine again …")
            engine = start_engine(tmp, tmp / "data", env=env, port=port)
            back_at = time.monotonic()
            time.sleep(args.seconds / 3)
            stop.set()
            for thread in threads:
                thread.join(120)
            wait_until(lambda: engine_idle(engine.url, ENGINE_KEY), 300, what="the queue to drain")
            stored = {marker: documents_at(engine.url, ENGINE_KEY, marker) for marker in outcomes}
        finally:
            stop.set()
            bridge.stop()
            engine.stop()
    by_outcome = Counter(outcomes.values())
    consistent = Counter()
    for marker, outcome in outcomes.items():
        consistent[(outcome, stored[marker])] += 1
    phases = {"before": (0, killed_at - begun), "engine down": (killed_at - begun, back_at - begun), "after": (back_at - begun, 1e9)}
    read_stats = {}
    for name, (low, high) in phases.items():
        window = [(s, o) for started, s, o in reads if low <= started - begun < high]
        read_stats[name] = {"reads": len(window), "ok": sum(1 for _, o in window if o == "ok"),
                            "latency_ms": summary_ms([s for s, _ in window]) if window else None}
    results = {"writes": dict(by_outcome), "writes_by_outcome_and_copies_stored": {f"{o} -> {c}": n for (o, c), n in consistent.items()},
               "duplicates": sum(1 for c in stored.values() if c > 1), "reads": read_stats}
    print(f"\nwrites: {dict(by_outcome)}")
    print("outcome -> copies the engine holds:")
    for (outcome, copies), n in sorted(consistent.items()):
        print(f"  {outcome:<20} -> {copies}: {n}")
    print(f"notes stored twice: {results['duplicates']}")
    print("\nreads (kb_search) by phase:")
    for name, r in read_stats.items():
        lat = r["latency_ms"] or {}
        print(f"  {name:<12} {r['ok']}/{r['reads']} ok, p50 {lat.get('p50', '-')} ms, p99 {lat.get('p99', '-')} ms")
    print(f"\nwritten to {write_result('faults', results)}")


if __name__ == "__main__":
    main()
