"""Chunking cost against text size, for text without a single break point (no space, no newline): the
shape that used to make chunking quadratic (SECURITY.md, "linear chunking").

Not a test. Two measurements, side by side in one run:
- the chunker alone, in this process: CPU seconds of `chunk_text` on 4 MB and 32 MB (median of --runs);
- the local engine (full-text only, so the figure is the engine's own work, not the embedding model's):
  a 4 MB and a 32 MB .txt upload through `POST /api/v1/jobs`, timed from the upload until the job is done,
  while /healthz is polled every 0.2 s (its slowest answer is reported).

    python bench/chunking.py --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import requests
from common import progress, start_engine, write_result

from kb_bridge.local_engine.ingest.chunking import ChunkingPolicy, chunk_text

SIZES_MB = (4, 32)


def chunker_seconds(size_mb: int, runs: int) -> float:
    text = "a" * (size_mb * 1024 * 1024)
    times = []
    for _ in range(runs):
        started = time.process_time()
        chunk_text(text, "txt", ChunkingPolicy())
        times.append(time.process_time() - started)
    return statistics.median(times)


def engine_seconds(url: str, size_mb: int) -> tuple[float, float]:
    """(seconds from upload to job done, slowest /healthz answer meanwhile)."""
    slowest = [0.0]
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            started = time.monotonic()
            requests.get(url + "/healthz", timeout=30).raise_for_status()
            slowest[0] = max(slowest[0], time.monotonic() - started)
            stop.wait(0.2)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    started = time.monotonic()
    data = b"a" * (size_mb * 1024 * 1024)
    job = requests.post(url + "/api/v1/jobs", files={"file": (f"flat-{size_mb}.txt", data)}, timeout=600).json()
    while True:
        status = requests.get(f"{url}/api/v1/jobs/{job['id']}", timeout=30).json()["status"]
        if status in ("done", "failed"):
            break
        time.sleep(0.1)
    elapsed = time.monotonic() - started
    stop.set()
    poller.join()
    assert status == "done", status
    return elapsed, slowest[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs per size (medians are reported)")
    args = parser.parse_args()
    result: dict[str, Any] = {"chunker_cpu_s": {}, "engine_s": {}, "healthz_max_s": {}}
    for size in SIZES_MB:
        result["chunker_cpu_s"][size] = round(chunker_seconds(size, args.runs), 3)
        progress(f"chunker {size} MB: {result['chunker_cpu_s'][size]} s")
    with tempfile.TemporaryDirectory() as tmp:
        engine = start_engine(Path(tmp), Path(tmp) / "data", env={"KB_ENGINE_EMBEDDER": "none"})
        try:
            for size in SIZES_MB:
                runs = [engine_seconds(engine.url, size) for _ in range(args.runs)]
                result["engine_s"][size] = round(statistics.median(r[0] for r in runs), 3)
                result["healthz_max_s"][size] = round(max(r[1] for r in runs), 3)
                progress(f"engine {size} MB: {result['engine_s'][size]} s (healthz max {result['healthz_max_s'][size]} s)")
        finally:
            engine.stop()
    small, large = SIZES_MB
    result["chunker_ratio"] = round(result["chunker_cpu_s"][large] / result["chunker_cpu_s"][small], 2)
    result["engine_ratio"] = round(result["engine_s"][large] / result["engine_s"][small], 2)
    print(f"{'':<10} {'4 MB':>8} {'32 MB':>8} {'ratio':>6}")
    print(f"{'chunker':<10} {result['chunker_cpu_s'][small]:>8} {result['chunker_cpu_s'][large]:>8} {result['chunker_ratio']:>6}")
    print(f"{'engine':<10} {result['engine_s'][small]:>8} {result['engine_s'][large]:>8} {result['engine_ratio']:>6}")
    print(f"/healthz slowest answer while ingesting: {max(result['healthz_max_s'].values())} s")
    print(f"written to {write_result('chunking', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
