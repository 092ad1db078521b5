"""Context from adjacent notes: a note also scores a share of its neighbours' best scores.

A short note often holds the answer but not the words of the question: the question was asked, or the
subject named, in the note written just before it ("You play any instruments?" then "Yeah, I play
clarinet!"), or the note just after it goes on with the subject. Notes kept in one collection in the order
they were written (an agent's memory) are such a sequence; the store finds a note's neighbours by the order
of submission within the collection and the search's filter, up to `reach` notes on either side, each with
its distance d (store/adjacent.py). Every chunk among the best fused candidates (a fixed number of them,
KB_ENGINE_NEIGHBOUR_ANCHORS, so that the first results do not change with top_n) and each of their
neighbours then scores

    own + sum over d of decay^(d-1) * (weight * max(0, best own score of its neighbours at distance d)
                                       + lexical_weight * best lexical part of their scores)

where `own` is the fused score (search/fusion.py), computed for neighbours that were not candidates from
their exact cosine alone (they shared no word with the query that ranked them), and a lexical part is the
BM25 share of a fused score (`w_fts * bm25 / ceiling`). The lexical term lets the words of the question
found in the note before count for the answer after it, more than the model's similarity of that note
does: where the words are, the subject is (KB_ENGINE_NEIGHBOUR_LEXICAL_WEIGHT). The notes two away count
half as much (KB_ENGINE_NEIGHBOUR_REACH 2, KB_ENGINE_NEIGHBOUR_DECAY 0.5): an answer is often one turn
further than the question, after an aside, and a subject runs over several notes; three away added nothing
(LoCoMo, docs/benchmarks.md, "Memory retrieval"). Documents outside a collection (files, corpora ingested
without one) have no neighbours and keep their score, so document search is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from ..store.base import Ranking

def with_neighbours(
    ranked: Ranking,
    anchors: int,
    weight: float,
    adjacent_of: Callable[[Sequence[int]], Mapping[int, Mapping[int, int]]],
    scores_of: Callable[[Iterable[int]], Mapping[int, float]],
    lexical_weight: float = 0.0,
    lexical: Mapping[int, float] | None = None,
    decay: float = 0.5,
) -> Ranking:
    """`ranked` (fused, best first) re-scored with the neighbours of its first `anchors` candidates, best first.

    `adjacent_of(chunk_ids)` gives the neighbouring chunks of each chunk that has some, each with its
    distance (1: next to it); `scores_of(chunk_ids)` the fused score of chunks that were not candidates;
    `lexical` the lexical part of the candidates' fused scores (0 for others); `decay` how much less each
    further distance counts.
    """
    if (weight <= 0 and lexical_weight <= 0) or not ranked:
        return ranked
    adjacent = adjacent_of([chunk_id for chunk_id, _ in ranked[: max(anchors, 1)]])
    if not adjacent:
        return ranked
    own = dict(ranked)
    missing = {n for neighbours in adjacent.values() for n in neighbours if n not in own}
    if missing:
        found = scores_of(missing)
        own.update({chunk_id: found.get(chunk_id, 0.0) for chunk_id in missing})
    # Both ways: a neighbour that was no anchor takes its context from the anchors it neighbours.
    links: dict[int, dict[int, int]] = {}
    for chunk_id, neighbours in adjacent.items():
        for neighbour, distance in neighbours.items():
            if neighbour != chunk_id:
                links.setdefault(chunk_id, {})[neighbour] = distance
                links.setdefault(neighbour, {})[chunk_id] = distance
    words = lexical or {}

    def context(chunk_id: int) -> float:
        best: dict[int, float] = {}
        best_words: dict[int, float] = {}
        for neighbour, distance in links.get(chunk_id, {}).items():
            best[distance] = max(best.get(distance, 0.0), own[neighbour])
            best_words[distance] = max(best_words.get(distance, 0.0), words.get(neighbour, 0.0))
        return sum(decay ** (distance - 1) * (weight * best[distance] + lexical_weight * best_words[distance])
                   for distance in best)

    scores = {chunk_id: score + context(chunk_id) for chunk_id, score in own.items()}
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))
