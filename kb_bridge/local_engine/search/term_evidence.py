"""How much of the query a lexical candidate holds, and whether its words stand together: BM25 reweighed.

BM25 sums each query word's score on its own, so a note that repeats one word of the question (a name that is
in every note of a person's memory, or a common verb) can outscore one that holds several of its words, and a
note that holds "pottery" in one sentence and "class" in another scores as one that says "pottery class".
Two classic corrections, both from the query's own words and their IDF (as the full-text index weighs them,
within the search's filter when KB_ENGINE_FILTER_IDF applies), on each lexical candidate's BM25 score `s`:

- coverage (Lucene's coordination factor, weighted): `s * (IDF of the query's words the chunk holds / IDF of
  all the query's words) ** coverage_power`;
- proximity (as in BM25TP and sloppy phrase queries): `+ proximity_weight * ceiling * P`, where P is the share
  of the query's consecutive word pairs, each weighing the smaller IDF of its two words, whose words occur in
  the chunk at most `window` words apart.

Coverage leaves a chunk that holds every word of the query as it was and lowers the others; proximity
raises the chunks where the query's words stand together. The searcher applies this to notes kept in a
collection (short texts; searcher.py says why not to long chunks). On LoCoMo (agent memory) recall@5 0.697 to 0.725 with 0.5, 0.2 and 6, every conversation
up or level, the same settings chosen with any one conversation left out (docs/benchmarks.md, "Memory
retrieval").
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from ..store.base import Ranking


def reweighed(
    lexical: Ranking,
    ceiling: float,
    weights: Sequence[tuple[str, float]],
    tokens_of: Mapping[int, Sequence[str]],
    coverage_power: float,
    proximity_weight: float,
    window: int,
) -> Ranking:
    """`lexical` (chunk id, BM25 score) with each score corrected for coverage and proximity, best first.

    `weights` are the query's words as the index holds them, in query order, each once, with their IDF;
    `tokens_of` the words of each candidate's text as the index analyses them, in order (a chunk missing
    there keeps its score).
    """
    total = sum(weight for _, weight in weights)
    if not lexical or total <= 0 or (coverage_power <= 0 and proximity_weight <= 0):
        return lexical
    pairs = [((a, b), min(wa, wb)) for (a, wa), (b, wb) in itertools.pairwise(weights)]
    pair_total = sum(weight for _, weight in pairs)
    words = {word for word, _ in weights}
    scored: dict[int, float] = {}
    for chunk_id, score in lexical:
        tokens = tokens_of.get(chunk_id)
        if tokens is None:
            scored[chunk_id] = score
            continue
        positions = _positions(tokens, words)
        if coverage_power > 0:
            held = sum(weight for word, weight in weights if word in positions)
            score *= (held / total) ** coverage_power
        if proximity_weight > 0 and pair_total > 0:
            near = sum(weight for (a, b), weight in pairs if _within(positions.get(a), positions.get(b), window))
            score += proximity_weight * ceiling * near / pair_total
        scored[chunk_id] = score
    return sorted(scored.items(), key=lambda item: (-item[1], item[0]))


def _positions(tokens: Sequence[str], wanted: set[str]) -> dict[str, list[int]]:
    """Where each of the wanted words occurs among `tokens`, in order."""
    found: dict[str, list[int]] = {}
    for position, token in enumerate(tokens):
        if token in wanted:
            found.setdefault(token, []).append(position)
    return found


def _within(first: Sequence[int] | None, second: Sequence[int] | None, window: int) -> bool:
    """Some occurrence of one word is at most `window` positions from one of the other (both sorted)."""
    if not first or not second:
        return False
    i = j = 0
    while i < len(first) and j < len(second):
        if abs(first[i] - second[j]) <= window:
            return True
        if first[i] < second[j]:
            i += 1
        else:
            j += 1
    return False
