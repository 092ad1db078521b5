"""How long the local engine takes from its start until its model is ready, per runtime. Not a test.

Each round starts `kb-bridge engine` on an empty data directory (as `start_engine` does for every other
benchmark), then polls `/api/v1/status` every 20 ms until `embedder.state` is "ready" (the model loaded,
its format calibrated and every session warmed: embedding/onnx_embedder.py), and stops the engine. The
runtimes take turns round by round, so that other load hits all alike; the figure is the median of
`--rounds`, with the engine's resident memory (master and worker) once ready.

    python bench/engine_ready.py                                   # onnx (auto) against torch (auto)
    python bench/engine_ready.py --runtimes onnx --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import requests

from common import machine, progress, start_engine, vm_rss_kib, wait_until, worker_pids, write_result

RUNTIMES = {"onnx": {"KB_ENGINE_RUNTIME": "onnx"}, "torch": {"KB_ENGINE_RUNTIME": "torch"}}


def one_start(workdir: Path, name: str) -> tuple[float, int, dict[str, object]]:
    data = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=workdir))
    started = time.perf_counter()
    engine = start_engine(workdir, data, RUNTIMES[name])
    status: dict[str, object] = {}
    try:
        def ready() -> bool:
            status.update(requests.get(f"{engine.url}/api/v1/status", timeout=5).json())
            embedder = status.get("embedder")
            return isinstance(embedder, dict) and embedder.get("state") == "ready"

        wait_until(ready, timeout=300, interval=0.02, what=f"the {name} engine's model")
        seconds = time.perf_counter() - started
        rss = sum(vm_rss_kib(pid) for pid in [engine.process.pid, *worker_pids(engine)]) // 1024
    finally:
        engine.stop()
    return seconds, rss, status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtimes", nargs="+", choices=list(RUNTIMES), default=list(RUNTIMES))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {name: [] for name in args.runtimes}
    memory: dict[str, list[int]] = {name: [] for name in args.runtimes}
    formats: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="kb-engine-ready-") as workdir:
        for round_number in range(args.rounds):
            for name in args.runtimes:
                took, rss, status = one_start(Path(workdir), name)
                seconds[name].append(took)
                memory[name].append(rss)
                model = status.get("model")
                formats[name] = model.get("precision") if isinstance(model, dict) else None
                progress(f"round {round_number + 1} {name}: ready in {took:.2f} s, {rss} MiB")
    rows = {name: {"ready_s": round(statistics.median(seconds[name]), 2), "rss_mib": int(statistics.median(memory[name])),
                   "precision": formats[name], "rounds": [round(value, 2) for value in seconds[name]]}
            for name in args.runtimes}
    for name, row in rows.items():
        print(f"{name:6} ready in {row['ready_s']:.2f} s (median of {args.rounds}), {row['rss_mib']} MiB, {row['precision']}")
    write_result("engine-ready", {"machine": machine(), "rows": rows})


if __name__ == "__main__":
    main()
