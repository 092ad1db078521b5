"""Choosing a model's number format: float32, or a 16-bit format where this device runs it faster.

CPUs with bfloat16 instructions (AVX512-BF16, AMX, recent ARM) run the model about 1.5 to 2.5 times faster in
bfloat16; on others PyTorch emulates it, which is slower: on this repository's 2-core Xeon without
AVX512-BF16, three times slower (docs/benchmarks.md). GPUs run float16 or bfloat16 natively. So `auto`
measures: it runs the same sample through both copies of the model, alternately (so that other load on the
machine hits both alike), and keeps the 16-bit copy only when it is at least `MIN_SPEEDUP` faster and each of
its vectors has a cosine of at least `min_cosine` with the float32 one. A named precision is taken as given.
"""

from __future__ import annotations

import copy
import logging
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

# int8 is the ONNX runtime's only (onnx_precision.py); torch refuses it (`torch_precision`).
PRECISION_CHOICES = ("auto", "float32", "bfloat16", "float16", "int8")
MIN_SPEEDUP = 1.15
_ROUNDS = 3


def torch_precision(choice: str, variable: str) -> str:
    """`choice` checked against what torch runs here; ConfigError naming `variable` otherwise."""
    if choice == "int8":
        raise ConfigError(f"{variable}=int8 is for the ONNX runtime (KB_ENGINE_RUNTIME=onnx or auto on a CPU); "
                          "torch runs auto, float32, bfloat16 or float16")
    return choice


def in_precision(model: Any, choice: str, half: str, sample: Callable[[Any], np.ndarray], min_cosine: float,
                 what: str) -> tuple[Any, str]:
    """(the model in the precision to use, its name). `model` is in float32; `half` is the 16-bit format to
    consider on this device (device.half_precision); `sample(model)` embeds the calibration texts."""
    if torch_precision(choice, what) == "float32":
        return model, "float32"
    import torch

    name = half if choice == "auto" else choice
    fast = copy.deepcopy(model).to(getattr(torch, name))
    if choice != "auto":
        return fast, name
    cosine, slow_ms, fast_ms = _compare(model, fast, sample)
    if cosine >= min_cosine and slow_ms >= MIN_SPEEDUP * fast_ms:
        logger.info("%s in %s: %.1f ms per sample instead of %.1f ms, cosine to float32 >= %.5f",
                    what, name, fast_ms, slow_ms, cosine)
        return fast, name
    logger.info("%s in float32 (%s: %.1f ms per sample against %.1f ms, cosine >= %.5f)",
                what, name, fast_ms, slow_ms, cosine)
    return model, "float32"


def _compare(slow: Any, fast: Any, sample: Callable[[Any], np.ndarray]) -> tuple[float, float, float]:
    """(lowest cosine between the two models' vectors, median ms of the slow one, median ms of the fast one)."""
    import numpy as np

    reference, candidate = sample(slow), sample(fast)  # the first calls allocate and warm up: not timed
    cosines = np.sum(np.asarray(reference, dtype=np.float32) * np.asarray(candidate, dtype=np.float32), axis=1)
    timings: dict[int, list[float]] = {0: [], 1: []}
    for _ in range(_ROUNDS):
        for which, model in enumerate((slow, fast)):
            started = time.perf_counter()
            sample(model)
            timings[which].append((time.perf_counter() - started) * 1000)
    return float(np.min(cosines)), statistics.median(timings[0]), statistics.median(timings[1])
