"""Plots for docs/benchmarks.md from the newest result files in bench/results/.

    python bench/plots.py          # writes docs/bench-latency.png and docs/bench-throughput.png
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from common import REPO, RESULTS

DOCS = REPO / "docs"


def newest(name: str) -> dict[str, Any] | None:
    files = sorted(RESULTS.glob(f"{name}-*.json"))
    return json.loads(files[-1].read_text()) if files else None


def latency_plot(overhead: dict[str, Any]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = overhead["samples_ms"]
    order = ["engine direct", "kb_search bridge", "kb_search bridge-lean", "kb_search reference", "kb_search bridge-legacy",
             "kb_search reference-legacy", "kb_echo bridge", "kb_echo bridge-lean", "kb_echo reference", "kb_echo bridge-legacy",
             "kb_echo reference-legacy"]
    names = [n for n in order if n in samples]
    fig, ax = plt.subplots(figsize=(10, 4.8))
    ax.boxplot([samples[n] for n in names], orientation="horizontal", showfliers=False, whis=(5, 99))
    ax.set_yticks(range(1, len(names) + 1), [n.replace("bridge", "kb-bridge").replace("reference", "MCPServer") for n in names])
    ax.invert_yaxis()
    ax.set_xlabel("latency per call, ms (box: p25-p75, line: p50, whiskers: p5-p99)")
    ax.set_title(f"One client, calls interleaved ({overhead['rounds']} rounds); kb_search full-text, kb_echo no engine")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    path = DOCS / "bench-latency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def throughput_plot(concurrency: dict[str, Any]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = concurrency["echo_summary"]
    levels = sorted(summary, key=int)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for server, style in (("kb-bridge", "o-"), ("kb-bridge lean", "^:"), ("MCPServer", "s--")):
        if server not in summary[levels[0]]:
            continue  # results from before the lean column
        ax.plot([int(x) for x in levels], [summary[x][server] for x in levels], style, label=server)
    ax.set_xscale("log", base=2)
    ax.set_xticks([int(x) for x in levels], levels)
    ax.set_xlabel("concurrent connections (wrk)")
    ax.set_ylabel("kb_echo calls per second")
    ax.set_title("Throughput, 2 worker processes each (median of runs)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = DOCS / "bench-throughput.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    DOCS.mkdir(exist_ok=True)
    overhead, concurrency = newest("overhead"), newest("concurrency")
    if overhead:
        print("wrote", latency_plot(overhead))
    if concurrency:
        print("wrote", throughput_plot(concurrency))


if __name__ == "__main__":
    main()
