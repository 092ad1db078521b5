"""BM25 of a filtered search weighs a word by its IDF among the chunks the filter allows (store/text_index.py,
KB_ENGINE_FILTER_IDF): a name that is rare in the whole index but in nearly every note of one collection must
not outrank the word that tells that collection's notes apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from kb_bridge.local_engine.config import load_config
from kb_bridge.local_engine.store.base import DocumentFilter
from kb_bridge.local_engine.store.text_index import BM25_K1, TextIndex
from kb_bridge.testing.engine_app import bm25_idf

MEMORY = DocumentFilter(tags=("collection:alice",))

WRITTEN = "2026-01-01T00:00:00.000Z"  # created_at and updated_at of every chunk


@pytest.fixture
def index(tmp_path: Path) -> TextIndex:
    """One collection of 9 notes, 8 naming Alice, 1 on her clarinet; 40 other documents about clarinets."""
    text = TextIndex(tmp_path / "text", "test-db", title_repeats=0)
    rows = [(1, 1, "", "Alice said Alice would call Alice back about the weather", "note", ["collection:alice"]),
            (2, 2, "", "played my clarinet at the concert tonight", "note", ["collection:alice"])]
    rows += [(n, n, "", f"Alice talked about topic {n}", "note", ["collection:alice"]) for n in range(3, 10)]
    rows += [(n, n, "", f"clarinet reed review number {n}", "document", ["shop"]) for n in range(10, 50)]
    text.put([(*row, WRITTEN, WRITTEN) for row in rows])
    text.commit(1)
    return text


def test_a_filtered_search_ranks_by_the_idf_within_its_filter(index: TextIndex) -> None:
    query = "Alice clarinet"
    # Over the whole index "alice" is rare (9 of 49) and "clarinet" common (41 of 49): the note that repeats
    # the name wins. Within the collection the name is in 8 of 9 notes and the clarinet in 1.
    assert index.search(query, MEMORY, 3)[0][0] == 1
    assert index.search(query, MEMORY, 3, filter_idf=True)[0][0] == 2


def test_the_ceiling_follows_the_same_idf(index: TextIndex) -> None:
    query = "Alice clarinet"

    assert index.score_ceiling(query) == pytest.approx((BM25_K1 + 1) * (bm25_idf(49, 8) + bm25_idf(49, 41)))
    within = index.score_ceiling(query, MEMORY, filter_idf=True)
    assert within == pytest.approx((BM25_K1 + 1) * (bm25_idf(9, 8) + bm25_idf(9, 1)))
    # No chunk of the filtered search scores above its ceiling, so fusion's BM25 share stays within 0..1.
    assert max(score for _, score in index.search(query, MEMORY, 9, filter_idf=True)) <= within


def test_a_search_given_the_counted_weights_ranks_as_one_that_counts_them(index: TextIndex) -> None:
    """Hybrid search counts the IDFs within the filter once (`term_weights`) and hands them to `search`."""
    within = dict(index.term_weights("Alice clarinet", MEMORY, filter_idf=True))
    assert index.search("Alice clarinet", MEMORY, 9, filter_idf=True, within=within) == index.search(
        "Alice clarinet", MEMORY, 9, filter_idf=True)


def test_a_search_without_a_filter_is_unchanged(index: TextIndex) -> None:
    everything = DocumentFilter()
    assert index.search("Alice clarinet", everything, 20, filter_idf=True) == index.search("Alice clarinet", everything, 20)
    assert index.score_ceiling("Alice clarinet", everything, filter_idf=True) == index.score_ceiling("Alice clarinet")


def test_the_setting_is_on_by_default_and_can_be_turned_off() -> None:
    assert load_config({}).filter_idf is True
    assert load_config({"KB_ENGINE_FILTER_IDF": "false"}).filter_idf is False
