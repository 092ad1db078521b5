"""Context from adjacent notes: a note also scores a share of its best neighbour's score.

A short note often holds the answer but not the words of the question: the question was asked, or the
subject named, in the note written just before it ("You play any instruments?" then "Yeah, I play
clarinet!"), or the note just after it goes on with the subject. Notes kept in one collection in the order
they were written (an agent's memory) are such a sequence; the store finds a note's neighbours by the order
of submission within the collection and the search's filter (store/adjacent.py). Every chunk among the best
fused candidates and each of their neighbours then scores

    own + weight * max(0, best own score of its neighbours)
        + lexical_weight * (best lexical part of its neighbours' scores)

where `own` is the fused score (search/fusion.py), computed for neighbours that were not candidates from
their exact cosine alone (they shared no word with the query that ranked them), and a lexical part is the
BM25 share of a fused score (`w_fts * bm25 / ceiling`). The second term lets the words of the question
found in the note before count for the answer after it, more than the model's similarity of that note
does: where the words are, the subject is (KB_ENGINE_NEIGHBOUR_LEXICAL_WEIGHT; LoCoMo recall@5 0.668 to
0.680 on top of the first term, docs/benchmarks.md). Documents outside a
collection (files, corpora ingested without one) have no neighbours and keep their score, so document
search is unchanged. Measured on LoCoMo and SciFact: docs/benchmarks.md, "Memory retrieval".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from ..store.base import Ranking

# How many of the best fused candidates look for their neighbours, per result asked for: deeper costs one
# larger SQL lookup and finds only notes that cannot reach the results anyway.
ANCHORS_PER_RESULT = 2


def with_neighbours(
    ranked: Ranking,
    top_n: int,
    weight: float,
    adjacent_of: Callable[[Sequence[int]], Mapping[int, Sequence[int]]],
    scores_of: Callable[[Iterable[int]], Mapping[int, float]],
    lexical_weight: float = 0.0,
    lexical: Mapping[int, float] | None = None,
) -> Ranking:
    """`ranked` (fused, best first) re-scored with its best candidates' neighbours, best first.

    `adjacent_of(chunk_ids)` gives the neighbouring chunks of each chunk that has some; `scores_of(chunk_ids)`
    the fused score of chunks that were not candidates; `lexical` the lexical part of the candidates' fused
    scores (0 for others).
    """
    if (weight <= 0 and lexical_weight <= 0) or not ranked:
        return ranked
    anchors = [chunk_id for chunk_id, _ in ranked[: max(top_n, 1) * ANCHORS_PER_RESULT]]
    adjacent = adjacent_of(anchors)
    if not adjacent:
        return ranked
    own = dict(ranked)
    missing = {n for neighbours in adjacent.values() for n in neighbours if n not in own}
    if missing:
        found = scores_of(missing)
        own.update({chunk_id: found.get(chunk_id, 0.0) for chunk_id in missing})
    links: dict[int, set[int]] = {}
    for chunk_id, neighbours in adjacent.items():
        for neighbour in neighbours:
            if neighbour != chunk_id:
                links.setdefault(chunk_id, set()).add(neighbour)
                links.setdefault(neighbour, set()).add(chunk_id)
    words = lexical or {}
    scores = {
        chunk_id: score + weight * max(0.0, max((own[n] for n in links.get(chunk_id, ())), default=0.0))
        + lexical_weight * max((words.get(n, 0.0) for n in links.get(chunk_id, ())), default=0.0)
        for chunk_id, score in own.items()
    }
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))
