"""Coverage and proximity (search/term_evidence.py): a lexical candidate's BM25 score corrected for the share
of the query's words it holds and for the query's word pairs standing together in it; the store's query
terms and chunk tokens they are computed from; and the search that applies them to notes kept in a
collection only (KB_ENGINE_COVERAGE_POWER, KB_ENGINE_PROXIMITY_WEIGHT, KB_ENGINE_PROXIMITY_WINDOW)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import flask
import pytest
from flask.testing import FlaskClient

from kb_bridge.local_engine.app import engine_of
from kb_bridge.local_engine.config import ConfigError, load_config
from kb_bridge.local_engine.search.term_evidence import reweighed
from kb_bridge.local_engine.store.base import DocumentFilter
from kb_bridge.local_engine.store.text_index import BM25_K1

from kb_bridge.testing.engine_app import API, add_note, bm25_idf

WEIGHTS = (("pottery", 2.0), ("class", 1.0), ("mel", 0.5))


def test_coverage_lowers_a_chunk_by_the_share_of_the_querys_idf_it_lacks() -> None:
    lexical = [(1, 3.0), (2, 2.5)]
    tokens = {1: ["pottery", "pottery", "pottery"], 2: ["mel", "took", "a", "pottery", "class"]}
    scores = dict(reweighed(lexical, 10.0, WEIGHTS, tokens, coverage_power=0.5, proximity_weight=0.0, window=6))
    assert scores[1] == pytest.approx(3.0 * math.sqrt(2.0 / 3.5))
    assert scores[2] == pytest.approx(2.5)  # holds every word: unchanged
    assert [chunk_id for chunk_id, _ in reweighed(lexical, 10.0, WEIGHTS, tokens, 0.5, 0.0, 6)] == [2, 1]


def test_proximity_adds_the_share_of_word_pairs_standing_together() -> None:
    # Pairs (pottery, class) weigh 1.0 and (class, mel) 0.5. Chunk 1 holds the first pair side by side,
    # chunk 2 the same words seven apart, chunk 3 has no tokens known and keeps its score.
    lexical = [(2, 2.0), (1, 1.9), (3, 1.0)]
    tokens = {1: ["pottery", "class", "today"], 2: ["pottery", "a", "b", "c", "d", "e", "f", "class"]}
    scores = dict(reweighed(lexical, 10.0, WEIGHTS, tokens, coverage_power=0.0, proximity_weight=0.2, window=6))
    assert scores[1] == pytest.approx(1.9 + 0.2 * 10.0 * 1.0 / 1.5)
    assert scores[2] == pytest.approx(2.0)
    assert scores[3] == pytest.approx(1.0)
    wider = dict(reweighed(lexical, 10.0, WEIGHTS, tokens, coverage_power=0.0, proximity_weight=0.2, window=7))
    assert wider[2] == pytest.approx(2.0 + 0.2 * 10.0 * 1.0 / 1.5)


def test_with_both_off_or_no_words_the_ranking_is_unchanged() -> None:
    lexical = [(1, 3.0), (2, 2.5)]
    tokens = {1: ["pottery"], 2: ["class"]}
    assert reweighed(lexical, 10.0, WEIGHTS, tokens, 0.0, 0.0, 6) == lexical
    assert reweighed(lexical, 10.0, (), tokens, 0.5, 0.2, 6) == lexical
    assert reweighed([], 10.0, WEIGHTS, tokens, 0.5, 0.2, 6) == []


@pytest.mark.both_stores
def test_the_store_gives_the_querys_weighted_words_and_the_chunks_tokens(app: flask.Flask, client: FlaskClient) -> None:
    notes = [add_note(client, text, tags=["collection:diary"]) for text in (
        "Mel took a pottery class", "Mel went running", "Mel painted a lake")]
    add_note(client, "Pottery shop opening hours", tags=["shop"])
    store = engine_of(app).store
    diary = DocumentFilter(tags=("collection:diary",))

    terms = store.query_terms("Pottery classes, Mel?", diary, filter_idf=True)
    assert [word for word, _ in terms.weights] == ["potteri", "class", "mel"]  # stemmed, in query order
    assert dict(terms.weights)["mel"] == pytest.approx(bm25_idf(3, 3))  # within the filter: in all three
    assert terms.ceiling == pytest.approx((BM25_K1 + 1) * sum(weight for _, weight in terms.weights))
    overall = store.query_terms("Pottery classes, Mel?")
    assert dict(overall.weights)["potteri"] != dict(terms.weights)["potteri"]
    chunk = int(notes[0]["chunks"][0]["id"])
    tokens = store.text_tokens([chunk, 999_999])
    assert list(tokens) == [chunk]  # a chunk that does not exist is left out
    assert tokens[chunk][-3:] == ["a", "potteri", "class"]


CONVERSATION = (
    "Mel: Class photos from the school trip to the lake came back today, the kids look happy, and my old "
    "pottery teacher says hi.",
    "Mel: After weeks of thinking about it and asking everyone I know for advice, I finally signed up for the "
    "evening pottery class at the community centre near the station.",
    "Mel: Pottery! Pottery, pottery.",
    "Mel: The weather was fine for a walk along the river.",
)
# Adjacent notes off, so that only the words of each note count.
ALONE = {"neighbour_weight": 0.0, "neighbour_lexical_weight": 0.0}


@pytest.mark.parametrize("on", [True, False])
def test_in_a_memory_the_note_holding_the_words_together_ranks_first(
    make_app: Callable[..., flask.Flask], model: object, on: bool
) -> None:
    """Without the correction the first note wins (shorter than the answer, both words far apart), and the
    third (one word, repeated) comes close to the answer."""
    settings = ALONE if on else {**ALONE, "coverage_power": 0.0, "proximity_weight": 0.0}
    client = make_app(model=model, **settings).test_client()
    ids = [add_note(client, text, tags=["collection:memory"])["id"] for text in CONVERSATION]
    response = client.post(f"{API}/search", json={"query": "Mel pottery class", "mode": "hybrid", "top_n": 4})
    ranked = [hit["document_id"] for hit in response.json["results"]]
    assert ranked[0] == (ids[1] if on else ids[0]), ranked


def test_documents_outside_a_collection_are_not_reweighed(
    make_app: Callable[..., flask.Flask], model: object, tmp_path: Path
) -> None:
    """Only notes kept in a collection: other documents keep BM25's scores (their chunks are long, and the
    correction cost more than it gained there), so the same notes without a collection rank and score
    alike with the settings on and off."""
    results = []
    for settings in (ALONE, {**ALONE, "coverage_power": 0.0, "proximity_weight": 0.0}):
        client = make_app(model=model, data_dir=tmp_path / f"data-{len(results)}", **settings).test_client()
        for text in CONVERSATION:
            add_note(client, text, tags=["diary"])
        response = client.post(f"{API}/search", json={"query": "Mel pottery class", "mode": "hybrid", "top_n": 4})
        results.append([(hit["text"], round(hit["score"], 9)) for hit in response.json["results"]])
    assert results[0] == results[1]


def test_the_settings() -> None:
    config = load_config({})
    assert (config.coverage_power, config.proximity_weight, config.proximity_window) == (0.5, 0.2, 6)
    config = load_config({"KB_ENGINE_COVERAGE_POWER": "0", "KB_ENGINE_PROXIMITY_WEIGHT": "0.3",
                          "KB_ENGINE_PROXIMITY_WINDOW": "3"})
    assert (config.coverage_power, config.proximity_weight, config.proximity_window) == (0.0, 0.3, 3)
    for name, bad in (("KB_ENGINE_COVERAGE_POWER", "-1"), ("KB_ENGINE_PROXIMITY_WEIGHT", "much"),
                      ("KB_ENGINE_PROXIMITY_WINDOW", "0")):
        with pytest.raises(ConfigError, match=name):
            load_config({name: bad})

