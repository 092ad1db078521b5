"""Upload throughput and worker memory: a file sent in max-size base64 chunks through kb-bridge
(gunicorn, 2 workers, auth on) to the local engine, with the directory store and the Redis store.

    python bench/uploads.py [--size-mib 100] [--runs 3] [--stores directory,redis]

Reports MiB/s end to end (kb_upload_start → every chunk → kb_upload_finish returning the job)
and each worker's peak-RSS growth over a small warm-up upload. Starts and stops the engine,
redis-server and the bridge itself, on loopback.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from common import McpHttp, free_port, progress, start_bridge, start_engine, summary_ms, vm_hwm_kib, wait_until, worker_pids, write_result

TOKEN = "bench-token-0123456789abcdef"
MIB = 1024 * 1024


def make_file(size: int) -> bytes:
    # A tiny valid PDF followed by random bytes: the engine indexes it quickly, every byte counts.
    from kb_bridge.testing.files import minimal_pdf

    return minimal_pdf(["Upload benchmark file."]) + os.urandom(size)


def wait_engine_idle(client: McpHttp) -> None:
    """Let the engine finish indexing the previous file, so runs do not compete for the CPU."""
    wait_until(lambda: not client.call("kb_jobs", {"status": "queued"})["jobs"] and not client.call("kb_jobs", {"status": "running"})["jobs"],
               600, interval=0.2, what="the engine to finish indexing")


def upload(client: McpHttp, data: bytes, name: str, chunk: int) -> float:
    """Seconds from kb_upload_start to kb_upload_finish's answer. The agent's own work (hashing
    and base64-encoding its file) is done before the clock starts: it is not the bridge's cost."""
    digest = hashlib.sha256(data).hexdigest()
    pieces = [base64.b64encode(data[offset : offset + chunk]).decode() for offset in range(0, len(data), chunk)]
    started = time.perf_counter()
    begun = client.call("kb_upload_start", {"filename": name, "total_size": len(data), "sha256": digest})
    for index, piece in enumerate(pieces):
        raw = f'{{"upload_id": "{begun["upload_id"]}", "chunk_index": {index}, "data": "{piece}"}}'
        client.call("kb_upload_chunk", {}, raw_arguments=raw)
    finished = client.call("kb_upload_finish", {"upload_id": begun["upload_id"]})
    elapsed = time.perf_counter() - started
    assert finished["size_bytes"] == len(data), finished
    return elapsed


def start_redis(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    server = shutil.which("redis-server")
    if server is None:
        raise SystemExit("redis-server is not installed (apt-get install redis-server), or pass --stores directory")
    port = free_port()
    process = subprocess.Popen([server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(tmp)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    wait_until(lambda: _ping(redis.Redis(host="127.0.0.1", port=port)), 10, what="redis-server")
    return process, f"redis://127.0.0.1:{port}/0"


def _ping(client: object) -> bool:
    try:
        return bool(client.ping())  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--stores", default="directory,redis")
    args = parser.parse_args()
    data = make_file(args.size_mib * MIB)
    # Warm-up uploads exercise every path once (chunks, finish, the engine call), so the peak-RSS
    # baseline holds the fixed costs and the figure below is what a large file adds.
    warmup = make_file(16 * MIB)
    results = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        engine = start_engine(tmp, tmp / "engine", env={"KB_ENGINE_EMBEDDER": "none"})
        redis_process = None
        try:
            for store in args.stores.split(","):
                env = {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN, "KB_LOG_LEVEL": "WARNING",
                       "KB_UPLOAD_MAX_STAGED_BYTES": str(4 * len(data))}
                if store == "redis":
                    redis_process, url = start_redis(tmp)
                    env["KB_UPLOAD_STORE"] = url
                (tmp / store).mkdir()
                bridge = start_bridge(tmp / store, env, workers=2)
                try:
                    client = McpHttp(bridge.url, TOKEN)
                    chunk = client.call("kb_upload_start", {"filename": "probe.pdf", "total_size": 1})["max_chunk_bytes"]
                    for _ in range(2):
                        upload(client, warmup, "warmup.pdf", chunk)
                    baseline = {pid: vm_hwm_kib(pid) for pid in worker_pids(bridge)}
                    times = []
                    for run in range(args.runs):
                        wait_engine_idle(client)
                        progress(f"{store}: run {run + 1}/{args.runs} ({args.size_mib} MiB in {chunk // MIB} MiB chunks)")
                        times.append(upload(client, data, f"big-{run}.pdf", chunk))
                    growth = {pid: (vm_hwm_kib(pid) - before) / 1024 for pid, before in baseline.items()}
                finally:
                    bridge.stop()
                    if redis_process is not None:
                        redis_process.terminate()
                        redis_process.wait(10)
                        redis_process = None
                rates = [len(data) / MIB / t for t in times]
                results[store] = {
                    "mib_per_s_median": round(statistics.median(rates), 1),
                    "mib_per_s_runs": [round(r, 1) for r in rates],
                    "seconds": summary_ms(times),
                    "chunk_bytes": chunk,
                    "peak_rss_growth_mib_per_worker": {str(pid): round(g, 1) for pid, g in growth.items()},
                    "peak_rss_growth_limit_mib": round(3 * chunk / MIB, 1),
                }
        finally:
            engine.stop()
    print(f"\nUpload of {args.size_mib} MiB through kb-bridge (2 workers) to the local engine, median of {args.runs} runs")
    print(f"{'store':<10} {'MiB/s':>8} {'runs':<24} {'peak RSS growth per worker (MiB)':<36} {'limit':>6}")
    for store, r in results.items():
        growth = ", ".join(f"{g}" for g in r["peak_rss_growth_mib_per_worker"].values())
        print(f"{store:<10} {r['mib_per_s_median']:>8} {str(r['mib_per_s_runs']):<24} {growth:<36} {r['peak_rss_growth_limit_mib']:>6}")
    path = write_result("uploads", {"size_mib": args.size_mib, "runs": args.runs, "results": results})
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
