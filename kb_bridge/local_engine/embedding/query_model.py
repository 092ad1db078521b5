"""How queries are embedded: on one dedicated thread, with few torch threads, in bfloat16 where that is faster.

Embedding the query is most of a vector or hybrid search, and almost all of that is the model's matrix
products. Two choices make it cheaper and steadier; both were measured through the API on SciFact (809 claims,
10.6k chunks, 2 cores shared with another engineer's load, docs/benchmarks.md):

- **Threads.** Queries run on one thread of their own (`QueryThread`), which uses `query_threads` torch
  threads (default 1), while the ingestion thread keeps torch's default (all cores) for its batches. With
  two torch threads on two busy cores every matrix product waits for the slower thread: vector search p95
  was 90 and 536 ms in two runs in float32; on one thread 29 and 37 ms, and 20 and 21 ms in bfloat16. One
  thread also leaves the other core to the BM25 query that a hybrid search runs at the same time.
- **Number format.** `auto` keeps bfloat16 where this CPU runs it faster with the same vectors (precision.py
  measures both on a few query-sized texts, on the query thread, when the model loads: under a second),
  with every calibration vector at a cosine of at least `MIN_COSINE` to the float32 one. On SciFact, on an
  AMD EPYC with bfloat16 instructions: cosine to float32 >= 0.9999, nDCG@10 within 0.001 (hybrid 0.7493
  against 0.7497 through the API), query embedding 13.6 -> 9.0 ms p50 in process. (int8 dynamic
  quantisation, by contrast, gave cosine 0.94: too lossy.) Without those instructions float32 stays.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from .precision import in_precision

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)
T = TypeVar("T")

MIN_COSINE = 0.9999
_CALIBRATION = (
    "time off after having a baby",
    "how do I rotate the API keys of the staging cluster?",
    "Vitamin D deficiency is associated with a higher risk of respiratory infections in adults.",
    "error ZX-4471 when the disk quota is exceeded",
    "What did we decide about the release freeze before the holidays last year?",
    "Chronic exposure to particulate matter increases the incidence of cardiovascular disease.",
)


class QueryThread:
    """One thread that embeds queries with a sentence-transformers model, `threads` torch threads wide."""

    def __init__(self, model: Any, precision: str, threads: int, half: str = "bfloat16") -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kb-engine-query")
        limit_torch_threads(self._executor, threads)
        self._model, self.precision = self._executor.submit(_in_precision, model, precision, half).result()

    def submit(self, text: str) -> Future[np.ndarray]:
        return self._executor.submit(encode_query, self._model, text)

    def run(self, function: Callable[[], T]) -> T:
        """Call `function` on the query thread (tests look at the thread's torch settings this way)."""
        return self._executor.submit(function).result()


def encode_query(model: Any, text: str) -> np.ndarray:
    """One text through the model's own tokenize + forward (`encode()` adds ~1 ms of batching), L2-normalised."""
    import numpy as np
    import torch

    with torch.inference_mode():
        features = model.tokenize([text])
        if model.device.type != "cpu":
            features = {key: value.to(model.device) if hasattr(value, "to") else value
                        for key, value in features.items()}
        output = model(features)["sentence_embedding"].float()
        vector = torch.nn.functional.normalize(output, p=2, dim=1)[0]
    return np.asarray(vector.cpu().numpy(), dtype=np.float32)


def limit_torch_threads(executor: ThreadPoolExecutor, threads: int) -> None:
    """Give the executor's thread `threads` torch threads and leave every other thread as it was.

    torch.set_num_threads() sets the calling thread's OpenMP thread count and the process default that other
    threads take when they first use torch. So: set it on the query thread (after that thread's first use of
    torch, which would otherwise reset it), then put the process default back from this thread.
    """
    import torch

    default = torch.get_num_threads()

    def limit() -> None:
        torch.get_num_threads()  # the first use of torch on this thread sets its count from the default
        torch.set_num_threads(threads)

    executor.submit(limit).result()
    torch.set_num_threads(default)


def _in_precision(model: Any, precision: str, half: str) -> tuple[Any, str]:
    """The query model in the precision to use, and its name; runs on the query thread. `model` is float32."""
    import numpy as np

    def sample(candidate: Any) -> np.ndarray:
        return np.stack([encode_query(candidate, text) for text in _CALIBRATION])

    return in_precision(model, precision, half, sample, MIN_COSINE, "query model")
