"""Documents embedded by several copies of the model at once, each on a thread of its own.

On a CPU, one model call spread over all cores by torch's own threads waits at the end of every operation
for the slowest core, and a core lent to an upload or a commit for a moment stalls both. Independent copies,
each one torch thread wide (or a share of the cores on a large machine), never wait for each other inside a
call: on 2 cores two one-thread copies embedded SciFact's chunks at 20-22 chunks/s where one two-thread model
ran 16-20 (bench/ingestion.py; docs/benchmarks.md, "Where the CPU goes"). A call's texts (already sorted by
length by the ingestion worker) are dealt out in turn, so every copy gets texts of the same lengths.

Each copy is 90 MB in float32 (45 MB in 16 bits) under torch; ONNX Runtime's copies are sessions that read
one shared set of weights, each holding only its working memory (onnx_embedder.py). A GPU keeps one copy:
its own parallelism is the point.
The pool itself knows neither runtime: it gets the copies and a function that embeds with one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# More copies than this gain little and cost memory; a larger machine gives each copy more torch threads.
MAX_AUTO_WORKERS = 4


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity
        return os.cpu_count() or 1


def plan_workers(requested: int, device: str, cores: int) -> tuple[int, int]:
    """(copies of the model, threads per copy); `requested` 0 means pick for this machine; 0 threads: the
    runtime's default."""
    if device != "cpu":
        return 1, 0  # 0: torch's default
    workers = requested or min(cores, MAX_AUTO_WORKERS)
    return workers, max(1, cores // workers)


class DocumentPool:
    """Copies of a model, each behind its own thread; `encode(model, texts)` runs on those threads.

    Callers on several threads need no lock: a copy (and, on torch, its tokenizer, which is not thread-safe) is only ever
    touched by its own thread, and each call waits for its own shares. `prepare(executor)`, when given, runs
    once per thread before any work (torch sets its thread count there)."""

    def __init__(self, models: Sequence[Any], encode: Callable[[Any, list[str]], np.ndarray],
                 prepare: Callable[[ThreadPoolExecutor], None] | None = None) -> None:
        self.workers = len(models)
        self._encode = encode
        self._models = list(models)
        self._executors = [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"kb-engine-embed-{index}")
                           for index in range(self.workers)]
        if prepare is not None:
            for executor in self._executors:
                prepare(executor)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        shares = [list(texts[index :: self.workers]) for index in range(self.workers)]
        futures = [executor.submit(self._encode, model, share)
                   for executor, model, share in zip(self._executors, self._models, shares, strict=True) if share]
        parts = [future.result() for future in futures]
        vectors = np.empty((len(texts), parts[0].shape[1]), dtype=np.float32)
        for index, part in enumerate(parts):
            vectors[index :: self.workers] = part
        return vectors

    def close(self) -> None:
        for executor in self._executors:
            executor.shutdown(wait=False)
