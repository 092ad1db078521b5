"""Hybrid fusion: the pure functions, and a tiny corpus where each signal alone fails on a different query.

The corpus test runs the real model (loaded once per session). Query one is the product demo's failure:
BM25 matches an unrelated note on the common word "time" while the model clearly prefers the parental leave
note; reciprocal rank fusion with k = 60 put the unrelated note first. Query two is the opposite: the model
prefers the general note about tickets, BM25 the one note that holds the ticket's number. Hybrid must get both.
"""

from __future__ import annotations

from collections.abc import Callable

import flask
import pytest
from flask.testing import FlaskClient

from kb_bridge.local_engine.errors import ConfigError
from kb_bridge.local_engine.config import load_config
from kb_bridge.local_engine.search.fusion import Fusion, convex, reciprocal_rank

from kb_bridge.testing.engine_app import API, add_note

# The engine API suite: every test here runs once per store (tests/engine/conftest.py).
pytestmark = pytest.mark.both_stores

NOTES = {
    "parental": ("Parental leave", "Employees who become parents may take up to 26 weeks of paid leave when a child "
                 "is born or adopted."),
    "on_call": ("On-call rota", "The engineer on call answers pages within 15 minutes at any time of day; handover "
                "is every Monday."),
    "retention": ("Data retention", "Backups and logs are deleted after their retention period ends."),
    "ticket": ("Printer", "Ticket 4471: the printer on the third floor jams on double-sided jobs."),
    "tickets": ("Support tickets", "How to open a support ticket: describe the problem, add a screenshot, and pick "
                "a priority."),
    "expenses": ("Expenses", "Submit receipts within 30 days; meals are reimbursed up to 40 euros a day."),
}
# query -> (the note it is about, the signal that gets it wrong on its own)
QUERIES = {
    "time off after having a baby": ("parental", "fts"),
    "ticket 4471": ("ticket", "vector"),
}


def test_rrf_sums_weight_over_k_plus_rank() -> None:
    fused = reciprocal_rank([([(1, 9.0), (2, 5.0)], 1.0), ([(2, 0.9), (3, 0.8)], 1.0)], k=60)
    assert [chunk_id for chunk_id, _ in fused] == [2, 1, 3]
    assert fused[0][1] == pytest.approx(1 / 62 + 1 / 61)
    weighted = reciprocal_rank([([(1, 9.0)], 1.0), ([(3, 0.8)], 2.0)], k=60)
    assert [chunk_id for chunk_id, _ in weighted] == [3, 1]


def test_convex_weighs_cosine_and_the_bm25_share_of_its_ceiling() -> None:
    # Chunk 1: a weak lexical match (2 of a ceiling of 20) the model finds unrelated; chunk 2: no shared
    # word, but similar in meaning; chunk 3: a strong lexical match, vaguely similar.
    fused = convex([(1, 2.0), (3, 12.0)], 20.0, {1: 0.16, 2: 0.34, 3: 0.2}, fts_weight=1.0, vector_weight=1.0)
    assert [chunk_id for chunk_id, _ in fused] == [3, 2, 1]
    assert dict(fused)[3] == pytest.approx(0.5 * 0.2 + 0.5 * 12.0 / 20.0)
    assert dict(fused)[2] == pytest.approx(0.5 * 0.34)
    only_vectors = convex([(1, 2.0)], 20.0, {1: 0.16, 2: 0.34}, fts_weight=0.0, vector_weight=1.0)
    assert [chunk_id for chunk_id, _ in only_vectors] == [2, 1]
    assert convex([], 0.0, {}, 1.0, 1.0) == []


def test_notes_of_a_collection_take_the_memory_vector_share() -> None:
    # Chunk 1 (a note of a collection) and chunk 2 (a document) hold the same BM25 share and cosine: with
    # the memory share 0.4 the note weighs its BM25 share more; the document keeps the share of 0.5.
    fusion = Fusion(memory_share=0.4)
    lexical, cosines = [(1, 8.0), (2, 8.0)], {1: 0.3, 2: 0.3, 3: 0.6}
    fused = dict(fusion.fuse(lexical, 10.0, [(3, 0.6)], lambda ids: cosines, memory={1, 3}))
    assert fused[1] == pytest.approx(0.4 * 0.3 + 0.6 * 0.8)
    assert fused[2] == pytest.approx(0.5 * 0.3 + 0.5 * 0.8)
    assert fused[3] == pytest.approx(0.4 * 0.6)
    assert fusion.vector_only({4: 0.5}, memory=True) == {4: pytest.approx(0.2)}
    assert fusion.vector_only({4: 0.5}) == {4: pytest.approx(0.25)}
    # Without a memory share every chunk fuses alike.
    same = dict(Fusion().fuse(lexical, 10.0, [(3, 0.6)], lambda ids: cosines, memory={1, 3}))
    assert same[1] == pytest.approx(same[2]) == pytest.approx(0.5 * 0.3 + 0.5 * 0.8)


def test_the_lexical_part_is_the_bm25_share_of_a_convex_score() -> None:
    lexical = [(1, 8.0), (2, 4.0)]
    assert Fusion().lexical_part(lexical, 10.0) == {1: pytest.approx(0.4), 2: pytest.approx(0.2)}
    # A note of a collection takes the memory share's BM25 weight, 1 - 0.4.
    assert Fusion(memory_share=0.4).lexical_part(lexical, 10.0, memory={1}) == {
        1: pytest.approx(0.48), 2: pytest.approx(0.2)}
    assert Fusion().lexical_part(lexical, 0.0) == {}


def test_the_memory_vector_share_setting() -> None:
    assert load_config({}).memory_vector_share == 0.4
    assert load_config({"KB_ENGINE_MEMORY_VECTOR_SHARE": "0.3"}).memory_vector_share == 0.3
    assert load_config({"KB_ENGINE_MEMORY_VECTOR_SHARE": "off"}).memory_vector_share is None
    assert load_config({}).neighbour_lexical_weight == 0.4
    assert load_config({"KB_ENGINE_NEIGHBOUR_LEXICAL_WEIGHT": "0"}).neighbour_lexical_weight == 0.0
    for bad in ("1.5", "-0.1", "nan", "lots"):
        with pytest.raises(ConfigError, match="KB_ENGINE_MEMORY_VECTOR_SHARE"):
            load_config({"KB_ENGINE_MEMORY_VECTOR_SHARE": bad})


def test_the_neighbour_reach_decay_and_anchors_settings() -> None:
    default = load_config({})
    assert (default.neighbour_reach, default.neighbour_decay, default.neighbour_anchors) == (2, 0.5, 40)
    config = load_config({"KB_ENGINE_NEIGHBOUR_REACH": "1", "KB_ENGINE_NEIGHBOUR_DECAY": "0.3",
                          "KB_ENGINE_NEIGHBOUR_ANCHORS": "100"})
    assert (config.neighbour_reach, config.neighbour_decay, config.neighbour_anchors) == (1, 0.3, 100)
    for name, bad in (("KB_ENGINE_NEIGHBOUR_REACH", "0"), ("KB_ENGINE_NEIGHBOUR_REACH", "9"),
                      ("KB_ENGINE_NEIGHBOUR_REACH", "two"), ("KB_ENGINE_NEIGHBOUR_DECAY", "1.5"),
                      ("KB_ENGINE_NEIGHBOUR_DECAY", "-0.1"), ("KB_ENGINE_NEIGHBOUR_ANCHORS", "0"),
                      ("KB_ENGINE_NEIGHBOUR_ANCHORS", "1001"), ("KB_ENGINE_NEIGHBOUR_ANCHORS", "many")):
        with pytest.raises(ConfigError, match=name):
            load_config({name: bad})


def test_convex_fusion_scores_lexical_candidates_on_their_exact_cosine() -> None:
    asked: list[list[int]] = []

    def cosines_of(chunk_ids: object) -> dict[int, float]:
        asked.append(list(chunk_ids))  # type: ignore[call-overload]
        return {7: 0.6}

    fused = Fusion().fuse([(7, 5.0), (8, 4.0)], 10.0, [(8, 0.5), (9, 0.4)], cosines_of)
    assert asked == [[7]]  # only the lexical candidate the vector cut missed
    assert [chunk_id for chunk_id, _ in fused] == [7, 8, 9]


@pytest.fixture(scope="module")
def corpus_client(
    tmp_path_factory: pytest.TempPathFactory, model: object
) -> Callable[[str], tuple[FlaskClient, dict[int, str]]]:
    """An engine holding NOTES with a fusion method ("default": the engine's), built once per method, and
    note names by document id."""
    from kb_bridge.local_engine.app import create_app, engine_of
    from kb_bridge.local_engine.config import EngineConfig

    built: dict[str, tuple[flask.Flask, dict[int, str]]] = {}

    def build(method: str) -> tuple[FlaskClient, dict[int, str]]:
        if method not in built:
            data_dir = tmp_path_factory.mktemp(f"fusion-{method}")
            fusion = {} if method == "default" else {"fusion": method}
            app = create_app(EngineConfig(data_dir=data_dir, embedder="none", **fusion), embedder=model)
            client = app.test_client()
            names = {add_note(client, text, title=title)["id"]: name for name, (title, text) in NOTES.items()}
            built[method] = (app, names)
        app, names = built[method]
        return app.test_client(), names

    yield build  # type: ignore[misc]
    for app, _ in built.values():
        engine_of(app).close()


def top_note(client: FlaskClient, names: dict[int, str], query: str, mode: str) -> str:
    response = client.post(f"{API}/search", json={"query": query, "mode": mode, "top_n": 3})
    assert response.status_code == 200 and response.json["mode"] == mode, response.json
    return names[response.json["results"][0]["document_id"]]


@pytest.mark.parametrize("query", list(QUERIES))
def test_each_signal_alone_fails_on_one_query_and_hybrid_gets_both(
    corpus_client: Callable[[str], tuple[FlaskClient, dict[int, str]]], query: str
) -> None:
    client, names = corpus_client("default")
    expected, failing = QUERIES[query]
    working = "vector" if failing == "fts" else "fts"
    assert top_note(client, names, query, failing) != expected  # the corpus makes this signal fail ...
    assert top_note(client, names, query, working) == expected  # ... and the other one succeed
    assert top_note(client, names, query, "hybrid") == expected


def test_rank_fusion_lets_the_weak_lexical_match_win(
    corpus_client: Callable[[str], tuple[FlaskClient, dict[int, str]]],
) -> None:
    # Why the default is not RRF: the corpus above is one where RRF fails (and the test above would).
    client, names = corpus_client("rrf")
    assert top_note(client, names, "time off after having a baby", "hybrid") != "parental"
