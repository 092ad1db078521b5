"""kb-bridge under abuse (reliability checklist 39-41, full size): memory, errors and the latency
of ordinary calls while 1000 clients hold connections open, while 200 slowloris clients drip
headers and bodies, and 64 concurrent calls against an engine answering after 100 ms on top.

    python bench/abuse.py [--idle 1000] [--slow 200] [--seconds 10]

Starts and stops its own engine stand-in and bridge (gunicorn, 2 workers) on loopback; needs wrk.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import McpHttp, progress, start_bridge, summary_ms, vm_rss_kib, worker_pids, write_result
from concurrency import TOKEN, wrk
from kb_bridge.testing.abuse import open_and_call, slowloris
from kb_bridge.testing.processes import connections_of, wait_until
from kb_bridge.testing.standin import StandInEngine


def normal_latency(client: McpHttp, count: int = 60) -> dict[str, float]:
    samples = []
    for i in range(count):
        started = time.perf_counter()
        client.call("kb_search", {"query": f"normal {i}"})
        samples.append(time.perf_counter() - started)
    return summary_ms(samples)


def rss_mib(pids: list[int]) -> dict[str, float]:
    return {str(pid): round(vm_rss_kib(pid) / 1024, 1) for pid in pids}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--slow", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp_name, StandInEngine(delay=0.1) as engine:
        tmp = Path(tmp_name)
        bridge = start_bridge(tmp, {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN, "KB_KEEPALIVE": "600"}, workers=2)
        port = int(bridge.url.rsplit(":", 1)[1])
        client = McpHttp(bridge.url, TOKEN)
        pids = worker_pids(bridge)
        stop = threading.Event()
        try:
            normal_latency(client, 20)
            results["baseline"] = {"rss_mib": rss_mib(pids), "latency_ms": normal_latency(client)}

            progress(f"{args.idle} clients that call once and never close …")
            loop = asyncio.new_event_loop()
            pairs, writers = loop.run_until_complete(open_and_call(port, TOKEN, args.idle))
            mismatched = sum(1 for sent, got in pairs if sent != got)
            results["idle_clients"] = {"clients": args.idle, "mismatched_or_failed": mismatched, "rss_mib": rss_mib(pids),
                                       "latency_ms": normal_latency(client)}

            progress(f"{args.slow} slowloris clients on top …")
            drippers = [threading.Thread(target=slowloris, args=(port, stop, i % 2 == 0), daemon=True) for i in range(args.slow)]
            for thread in drippers:
                thread.start()
            wait_until(lambda: sum(connections_of(pid, port) for pid in pids) >= args.idle + args.slow, 60, what="every abusive connection")
            results["slowloris"] = {"clients": args.slow, "rss_mib": rss_mib(pids), "latency_ms": normal_latency(client)}

            progress(f"64 concurrent calls for {args.seconds} s against the 100 ms engine, abuse still on …")
            load = wrk(bridge.url, "kb_search", {"query": "under abuse"}, 64, args.seconds, tmp)
            load["efficiency"] = round(load["calls_per_s"] / 640, 3)
            results["concurrent_64_under_abuse"] = {**load, "rss_mib": rss_mib(pids)}
        finally:
            stop.set()
            for writer in locals().get("writers", []):
                writer.close()
            if "loop" in locals():
                loop.run_until_complete(asyncio.sleep(0))
                loop.close()
            bridge.stop()
    report(results)


def report(results: dict[str, Any]) -> None:
    print(f"\n{'phase':<34} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'worker RSS MiB':>18} errors")
    for phase in ("baseline", "idle_clients", "slowloris"):
        r = results[phase]
        lat = r["latency_ms"]
        errors = r.get("mismatched_or_failed", 0)
        label = {"baseline": "ordinary calls, no abuse", "idle_clients": f"+ {r.get('clients')} idle clients",
                 "slowloris": f"+ {r.get('clients')} slowloris"}[phase]
        print(f"{label:<34} {lat['p50']:>8.2f} {lat['p95']:>8.2f} {lat['p99']:>8.2f} {', '.join(map(str, r['rss_mib'].values())):>18} {errors}")
    load = results["concurrent_64_under_abuse"]
    print(f"\n64 concurrent kb_search calls (engine 100 ms) under abuse: {load['calls_per_s']} calls/s "
          f"({load['efficiency']:.0%} of 640), errors {load['errors'] + load['socket_errors']}, p50 {load['p50_ms']} ms, p99 {load['p99_ms']} ms")
    print(f"\nwritten to {write_result('abuse', results)}")


if __name__ == "__main__":
    main()
