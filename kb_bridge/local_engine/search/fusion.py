"""Hybrid fusion: how one query's BM25 ranking and vector ranking become one ranking.

Two methods (KB_ENGINE_FUSION):

- `convex` (the default): each candidate chunk scores
  `w_vector * cosine + w_fts * bm25 / ceiling`, with the weights scaled to sum to 1. `ceiling` is the highest
  BM25 score any chunk could reach for this query (the store's `query_terms(...).ceiling`), so the lexical part is the share
  of the query's lexical evidence that the chunk holds, from 0 to 1, and the cosine is the model's own
  absolute similarity. Every candidate of either signal is scored on both: its exact cosine is computed
  even when it is not among the vector candidates, and its BM25 is 0 only when it shares no word with the query
  (or ranks below the lexical candidates).
- `rrf`: reciprocal rank fusion, `sum(weight / (k + rank))` over the signals that found the chunk.

Why convex: rank fusion throws away how strong a match is. In a small knowledge base the one chunk that
shares a single common word with the query is BM25's first, and RRF ranks it above the chunk the model finds
twice as similar. With absolute scores a weak lexical match stays weak, and a strong one (an exact
identifier, a rare name) still wins over a vaguely similar text. It also ranked better on SciFact (809 train
claims, the same ingested corpus, bench/fusion_sweep.py): nDCG@10 0.749 for convex with weights 1:1, against
0.736 for RRF with k = 5 (0.738 at k = 1) and 0.727 at the textbook k = 60. Both signals alone: BM25 0.704,
vectors 0.680. Vector shares from 0.4 to 0.55 all gave 0.744-0.749: the optimum is broad.

Notes kept in a collection (an agent's memory: short notes, one per thing said) may take their own vector
share, `memory_share` (KB_ENGINE_MEMORY_VECTOR_SHARE): on LoCoMo 0.4 ranked better than the documents' 0.5,
chosen alike with any four of its five conversations left to choose it (docs/benchmarks.md, "Memory
retrieval"). A short note's BM25 share is a sharper signal than a long chunk's, and its cosine a noisier one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from ..store.base import Ranking


@dataclasses.dataclass(frozen=True)
class Fusion:
    """A fusion method and its settings (from the engine config; bench/fusion_sweep.py tries others)."""

    method: str = "convex"
    fts_weight: float = 1.0
    vector_weight: float = 1.0
    rrf_k: int = 5
    # The vector share for chunks of notes kept in a collection; None: the same as every chunk's.
    memory_share: float | None = None

    def fuse(
        self, lexical: Ranking, ceiling: float, semantic: Ranking,
        cosines_of: Callable[[Iterable[int]], Mapping[int, float]],
        memory: Collection[int] = (),
    ) -> Ranking:
        """One ranking from the BM25 candidates (with the ceiling of the store's `query_terms`) and the vector candidates.

        `cosines_of(chunk_ids)` gives the exact cosine of chunks that the vector cut missed; `memory` holds
        the candidates that are chunks of notes kept in a collection (scored with `memory_share`).
        """
        if self.method == "rrf":
            return reciprocal_rank([(lexical, self.fts_weight), (semantic, self.vector_weight)], self.rrf_k)
        cosines = dict(semantic)
        cosines.update(cosines_of([chunk_id for chunk_id, _ in lexical if chunk_id not in cosines]))
        fused = convex(lexical, ceiling, cosines, self.fts_weight, self.vector_weight)
        share = self.memory_share
        if share is None or not memory or self.fts_weight + self.vector_weight <= 0:
            return fused
        return convex(lexical, ceiling, cosines, 1 - share, share, keep=dict(fused), only=memory)

    def lexical_part(self, lexical: Ranking, ceiling: float, memory: Collection[int] = ()) -> dict[int, float]:
        """The BM25 share of each lexical candidate's convex score (`w_fts * bm25 / ceiling`)."""
        total = self.fts_weight + self.vector_weight
        if ceiling <= 0 or total <= 0:
            return {}
        beta = self.fts_weight / total
        memory_beta = beta if self.memory_share is None else 1 - self.memory_share
        return {chunk_id: (memory_beta if chunk_id in memory else beta) * score / ceiling for chunk_id, score in lexical}

    def vector_only(self, cosines: Mapping[int, float], memory: bool = False) -> dict[int, float]:
        """The convex score of chunks that no lexical candidate holds: their cosine's share alone (the
        memory share when they are chunks of notes kept in a collection)."""
        total = self.fts_weight + self.vector_weight
        if total <= 0:
            return {}
        share = self.memory_share if memory and self.memory_share is not None else self.vector_weight / total
        return {chunk_id: share * cosine for chunk_id, cosine in cosines.items()}


def convex(
    lexical: Ranking, ceiling: float, cosines: Mapping[int, float], fts_weight: float, vector_weight: float,
    keep: Mapping[int, float] | None = None, only: Collection[int] | None = None,
) -> Ranking:
    """Weighted sum of the cosine and the BM25 share of `ceiling`, over every chunk in `lexical` or `cosines`.

    `cosines` must hold the cosine of every candidate, the lexical ones included; a chunk without one
    (no vector yet) counts 0 there. Given `only`, just those chunks are scored with these weights and the
    others keep their score in `keep`.
    """
    total = fts_weight + vector_weight
    if total <= 0:
        return []
    alpha, beta = vector_weight / total, fts_weight / total
    bm25 = {chunk_id: score / ceiling for chunk_id, score in lexical} if ceiling > 0 else {}
    scores = {chunk_id: alpha * cosine + beta * bm25.get(chunk_id, 0.0) for chunk_id, cosine in cosines.items()}
    for chunk_id, share in bm25.items():
        scores.setdefault(chunk_id, beta * share)
    if only is not None:
        scores = {chunk_id: score if chunk_id in only else (keep or {}).get(chunk_id, score)
                  for chunk_id, score in scores.items()}
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def reciprocal_rank(rankings: Sequence[tuple[Ranking, float]], k: int) -> Ranking:
    """Reciprocal rank fusion: score = sum of weight / (k + rank), rank counted from 1. Best first."""
    scores: dict[int, float] = {}
    best_rank: dict[int, int] = {}
    for ranking, weight in rankings:
        for rank, (chunk_id, _) in enumerate(ranking, start=1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + weight / (k + rank)
            best_rank[chunk_id] = min(best_rank.get(chunk_id, rank), rank)
    return sorted(scores.items(), key=lambda item: (-item[1], best_rank[item[0]], item[0]))
