"""Diversity among the results: maximal marginal relevance (Carbonell and Goldstein, SIGIR 1998) over the fused
ranking.

A question whose answer is spread over several notes ("what instruments does she play?") finds many
near-copies of the one best-matching note first, and the others below the cut. Among the best
`POOL_PER_RESULT * top_n` candidates the results are picked one at a time, each the candidate with the best

    score - penalty * (highest cosine to a result already picked)

so a second chunk saying the same thing as the first gives way to one that says something else, while
anything much more relevant still wins. The scores returned stay the fused scores (search/fusion.py,
search/context.py); only the order changes. Measured on LoCoMo and SciFact: docs/benchmarks.md,
"Memory retrieval".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..store.base import Ranking

POOL_PER_RESULT = 3


def diversify(
    ranked: Ranking,
    top_n: int,
    penalty: float,
    vectors_of: Callable[[Sequence[int]], tuple[list[int], np.ndarray]],
) -> Ranking:
    """`ranked` (best first) with its first `top_n` picked by maximal marginal relevance, then the rest.

    `vectors_of(chunk_ids)` gives (the ids that have a vector, their unit vectors as rows); a candidate
    without a vector is never penalised.
    """
    if penalty <= 0 or len(ranked) < 2:
        return ranked
    pool = ranked[: max(top_n, 1) * POOL_PER_RESULT]
    found, matrix = vectors_of([chunk_id for chunk_id, _ in pool])
    if not found:
        return ranked
    row_of = {chunk_id: row for row, chunk_id in enumerate(found)}
    rows = np.array([row_of.get(chunk_id, -1) for chunk_id, _ in pool])
    has_vector = rows >= 0
    vectors = np.zeros((len(pool), matrix.shape[1]), dtype=np.float32)
    vectors[has_vector] = matrix[rows[has_vector]]
    scores = np.array([score for _, score in pool], dtype=np.float64)
    closest = np.zeros(len(pool))  # per candidate: highest cosine to a result picked so far (0 before any)
    open_ = np.ones(len(pool), dtype=bool)
    picked: list[int] = []
    while len(picked) < min(top_n, len(pool)):
        marginal = np.where(open_, scores - penalty * closest, -np.inf)
        best = int(np.argmax(marginal))  # the first of equals: the better fused rank
        picked.append(best)
        open_[best] = False
        if has_vector[best]:
            np.maximum(closest, vectors @ vectors[best], out=closest)
    chosen = {pool[i][0] for i in picked}
    return [pool[i] for i in picked] + [item for item in ranked if item[0] not in chosen]
