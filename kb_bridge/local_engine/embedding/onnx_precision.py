"""The ONNX runtime's number formats: float32, or int8 weights (onnx_int8.py) where they keep the vectors.

`auto` calibrates when the model loads, as precision.py does for torch: the query session is opened in
both formats, the same fixed texts go through both (each query-sized text alone, the two chunk-sized ones
together), and int8 is kept only when every calibration text's vector has a cosine of at least
`MIN_COSINE` with its float32 vector AND int8 is at least `MIN_SPEEDUP` faster on the chunk-sized texts
(timed alternately, so that other load on the machine hits both alike, and compared by their fastest
round: the median flipped the choice to float32 in one of two starts at a load average of 10 on 2 cores,
where the fastest round is the one least disturbed; the chunk-sized texts are most of the work, and timing
only them keeps the calibration near half a second). Otherwise float32, and the log says why. A
named int8 is taken as given, its cosines measured all the same (not its speed): its agreement is what the
store records about the vectors it holds (store_precision.py).

The bound 0.99 is issue 34's: per text, on a fixed set. SciFact's retrieval quality with int8 documents and
queries is in docs/benchmarks.md ("Runtimes and number formats").
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

ONNX_PRECISIONS = ("auto", "float32", "int8")
MIN_COSINE = 0.99
MIN_SPEEDUP = 1.15
_ROUNDS = 3
# Query-sized texts (embedded one at a time) and chunk-sized ones (about 1,000 characters, together).
QUERY_TEXTS = (
    "time off after having a baby",
    "how do I rotate the API keys of the staging cluster?",
    "Vitamin D deficiency is associated with a higher risk of respiratory infections in adults.",
    "error ZX-4471 when the disk quota is exceeded",
    "What did we decide about the release freeze before the holidays last year?",
    "Die Katze schläft auf dem Sofa, während draußen der Schnee fällt.",
)
DOCUMENT_TEXTS = tuple(
    " ".join([sentence] * 11)
    for sentence in (
        "Chronic exposure to particulate matter increases the incidence of cardiovascular disease.",
        "The release freeze starts two weeks before the holidays; only security fixes are merged.",
    )
)

Embed = Callable[[Sequence[str]], "np.ndarray"]


@dataclasses.dataclass(frozen=True)
class Agreement:
    """How int8 compared with float32 on the calibration texts."""

    cosine: float  # the lowest, over the texts
    float32_ms: float  # fastest of the timed passes over the chunk-sized texts
    int8_ms: float


def onnx_precision(choice: str, variable: str) -> str:
    """`choice` checked against what the ONNX runtime runs; ConfigError naming `variable` otherwise."""
    if choice not in ONNX_PRECISIONS:
        raise ConfigError(f"{variable}={choice} is for KB_ENGINE_RUNTIME=torch; the ONNX runtime runs "
                          f"{', '.join(ONNX_PRECISIONS[1:])} (or auto: int8 where it keeps the vectors)")
    return choice


def choose(choice: str, agreement: Agreement | None, what: str) -> str:
    """The precision to use for `choice` ("auto", "float32", "int8") given the calibration."""
    if choice != "auto":
        return choice
    assert agreement is not None, "auto needs a calibration"
    if agreement.cosine >= MIN_COSINE and agreement.float32_ms >= MIN_SPEEDUP * agreement.int8_ms:
        logger.info("%s in int8: %.1f ms per sample instead of %.1f ms, cosine to float32 >= %.5f", what,
                    agreement.int8_ms, agreement.float32_ms, agreement.cosine)
        return "int8"
    logger.info("%s in float32 (int8: %.1f ms per sample against %.1f ms, cosine >= %.5f; int8 needs a cosine "
                ">= %.2f and %.2f times the speed)", what, agreement.int8_ms, agreement.float32_ms,
                agreement.cosine, MIN_COSINE, MIN_SPEEDUP)
    return "float32"


def calibrate(float32: Embed, int8: Embed, timed: bool = True) -> Agreement:
    """Compare two ways of embedding (each takes texts, returns unit vectors) on the calibration texts;
    without `timed`, the cosines only (both times are then 0)."""
    import numpy as np

    def sample(embed: Embed) -> np.ndarray:
        return np.concatenate([np.concatenate([embed([text]) for text in QUERY_TEXTS]), embed(DOCUMENT_TEXTS)])

    reference, candidate = sample(float32), sample(int8)  # the first runs allocate: not timed
    cosine = float(np.min(np.sum(reference * candidate, axis=1)))
    timings: dict[int, list[float]] = {0: [0.0], 1: [0.0]}
    for _ in range(_ROUNDS if timed else 0):
        for which, embed in enumerate((float32, int8)):
            started = time.perf_counter()
            embed(DOCUMENT_TEXTS)
            timings[which].append((time.perf_counter() - started) * 1000)
    return Agreement(cosine, min(timings[0][timed:]), min(timings[1][timed:]))
