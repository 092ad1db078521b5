"""Context from adjacent notes (search/context.py), the store's lookup of them (store/adjacent.py), and diversity
among results (search/diversity.py).

The store test runs on both stores: a collection's notes in the order they were submitted, a note of
another collection and one outside any collection submitted in between. The search test runs the real
model on a short conversation whose answer shares no word with the question: only the note before it does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import flask
import numpy as np
import psycopg
import pytest
from flask.testing import FlaskClient

from kb_bridge.local_engine.app import engine_of
from kb_bridge.local_engine.search.context import with_neighbours
from kb_bridge.local_engine.search.diversity import diversify
from kb_bridge.local_engine.store import adjacent
from kb_bridge.local_engine.store.base import DocumentFilter, Store
from kb_bridge.local_engine.store.postgres.documents import where_sql

from kb_bridge.testing.engine_app import API, add_note, upload, wait_job
from kb_bridge.testing.postgres import PostgresServer
from kb_bridge.testing.sqlite_plans import plan_start, traced


def test_a_note_adds_a_share_of_its_best_neighbours_score() -> None:
    asked: list[set[int]] = []

    def scores_of(chunk_ids: object) -> dict[int, float]:
        asked.append(set(chunk_ids))  # type: ignore[call-overload]
        return {10: 0.3}

    ranked = [(1, 0.8), (2, 0.5), (3, 0.45), (4, 0.1)]
    fused = with_neighbours(ranked, 2, 0.25, lambda chunk_ids: {1: {10: 1}, 3: {2: 1, 4: 1}}, scores_of)
    assert asked == [{10}]  # only the neighbour that was no candidate
    scores = dict(fused)
    assert scores[1] == pytest.approx(0.8 + 0.25 * 0.3)
    assert scores[10] == pytest.approx(0.3 + 0.25 * 0.8)  # brought in by its neighbour
    assert scores[3] == pytest.approx(0.45 + 0.25 * 0.5)  # its best neighbour counts, not the sum
    assert scores[2] == pytest.approx(0.5 + 0.25 * 0.45)
    assert [chunk_id for chunk_id, _ in fused] == [1, 2, 3, 10, 4]  # 10, no candidate, passes candidate 4


def test_a_note_also_adds_a_share_of_its_best_neighbours_lexical_part() -> None:
    # Chunk 2 (the answer) shares no word with the query; its neighbour 1 (the question) holds them all,
    # lexical part 0.5 of its 0.6. Chunk 3 is a little more similar in meaning than 2, with no neighbour.
    ranked = [(1, 0.6), (3, 0.33), (2, 0.3)]
    lexical = {1: 0.5}
    plain = dict(with_neighbours(ranked, 2, 0.0, lambda ids: {1: {2: 1}}, lambda ids: {}))
    assert plain == dict(ranked)
    fused = with_neighbours(ranked, 2, 0.0, lambda ids: {1: {2: 1}}, lambda ids: {}, 0.4, lexical)
    assert dict(fused)[2] == pytest.approx(0.3 + 0.4 * 0.5)
    assert dict(fused)[1] == pytest.approx(0.6)  # its neighbour has no lexical part
    assert [chunk_id for chunk_id, _ in fused] == [1, 2, 3]
    both = dict(with_neighbours(ranked, 2, 0.25, lambda ids: {1: {2: 1}}, lambda ids: {}, 0.4, lexical))
    assert both[2] == pytest.approx(0.3 + 0.25 * 0.6 + 0.4 * 0.5)


def test_neighbours_further_away_count_less_by_the_decay() -> None:
    # Chunk 3 has a neighbour next to it (1) and one two notes away (2): each distance's best counts,
    # the second times the decay; chunk 2 also gets chunk 3's context back, at distance 2.
    ranked = [(1, 0.6), (2, 0.5), (3, 0.2)]
    lexical = {1: 0.3, 2: 0.4}
    adjacent = {3: {1: 1, 2: 2}}
    fused = dict(with_neighbours(ranked, 2, 0.25, lambda ids: adjacent, lambda ids: {}, 0.4, lexical, decay=0.5))
    assert fused[3] == pytest.approx(0.2 + (0.25 * 0.6 + 0.4 * 0.3) + 0.5 * (0.25 * 0.5 + 0.4 * 0.4))
    assert fused[2] == pytest.approx(0.5 + 0.5 * 0.25 * 0.2)
    assert fused[1] == pytest.approx(0.6 + 0.25 * 0.2)
    # decay 0: only the neighbours next to a note count, as with a reach of 1.
    nearest = dict(with_neighbours(ranked, 2, 0.25, lambda ids: adjacent, lambda ids: {}, 0.4, lexical, decay=0.0))
    assert nearest[3] == pytest.approx(0.2 + 0.25 * 0.6 + 0.4 * 0.3)
    assert nearest[2] == pytest.approx(0.5)


def test_without_weight_or_neighbours_the_ranking_is_unchanged() -> None:
    ranked = [(1, 0.8), (2, 0.5)]
    assert with_neighbours(ranked, 10, 0.0, lambda ids: {1: {2: 1}}, lambda ids: {}) == ranked
    assert with_neighbours(ranked, 10, 0.25, lambda ids: {}, lambda ids: {}) == ranked


def store_of(app: flask.Flask) -> Store:
    return engine_of(app).store


@pytest.mark.both_stores
def test_neighbours_are_the_notes_submitted_beside_it_in_its_collection(
    app: flask.Flask, client: FlaskClient
) -> None:
    neighbours_are_the_notes_submitted_beside_them(app, client)


def neighbours_are_the_notes_submitted_beside_them(app: flask.Flask, client: FlaskClient) -> None:
    def note(text: str, *tags: str) -> int:
        """The note's one chunk."""
        return int(add_note(client, text, tags=list(tags))["chunks"][0]["id"])

    first = note("first note of the diary", "collection:diary", "day:1")
    note("a note of another collection", "collection:work")
    note("a note in no collection")
    second = note("second note of the diary", "collection:diary")
    third = note("third note of the diary", "collection:diary", "day:1")
    fourth = note("fourth note of the diary", "collection:diary")
    adjacent = store_of(app).adjacent_notes([first, second, third], DocumentFilter())
    assert adjacent == {first: {second: 1}, second: {first: 1, third: 1}, third: {second: 1, fourth: 1}}
    # The search's filter applies to neighbours: with day:1 the second note is not there to be one.
    assert store_of(app).adjacent_notes([first, third], DocumentFilter(tags=("day:1",))) == {
        first: {third: 1}, third: {first: 1}}
    assert store_of(app).adjacent_notes([], DocumentFilter()) == {}
    # Two notes on either side, counted within the collection: the other collection's note and the one in
    # none, submitted in between, are not counted.
    assert store_of(app).adjacent_notes([first, third], DocumentFilter(), reach=2) == {
        first: {second: 1, third: 2}, third: {second: 1, first: 2, fourth: 1}}
    assert store_of(app).adjacent_notes([second], DocumentFilter(), reach=3) == {second: {first: 1, third: 1, fourth: 2}}


@pytest.mark.both_stores
def test_collection_notes_are_the_chunks_of_notes_kept_in_a_collection(app: flask.Flask, client: FlaskClient) -> None:
    """Which chunks hybrid fusion scores with the memory vector share (search/fusion.py)."""
    collection_notes_are_the_notes_kept_in_a_collection(app, client)


def collection_notes_are_the_notes_kept_in_a_collection(app: flask.Flask, client: FlaskClient) -> None:
    kept = int(add_note(client, "a note of the diary", tags=["collection:diary"])["chunks"][0]["id"])
    loose = int(add_note(client, "a note in no collection", tags=["diary"])["chunks"][0]["id"])
    job = wait_job(client, upload(client, "f.txt", b"a file of the diary", tags=["collection:diary"]).json["id"])
    filed = int(client.get(f"{API}/documents/{job['document_id']}").json["chunks"][0]["id"])
    store = engine_of(app).store
    assert store.collection_notes([kept, loose, filed]) == {kept}
    assert store.collection_notes([]) == set()


class Recording:
    """A connection that keeps the statements run through it."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self.statements: list[tuple[str, list[object]]] = []

    def execute(self, sql: str, params: list[object]) -> psycopg.Cursor:
        self.statements.append((sql, params))
        return self.conn.execute(sql, params)


def copy_in_files(conn: psycopg.Connection) -> None:
    """3,000 one-chunk files, written straight into the tables as `kb-bridge migrate` would: a corpus that a
    memory is later stored beside."""
    conn.execute("INSERT INTO documents (title, doc_type, size_bytes, sha256, created_at, updated_at) "
                 "SELECT 'file ' || i, 'txt', 1, 'x', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z' "
                 "FROM generate_series(1, 3000) AS i")
    conn.execute("INSERT INTO chunks (document_id, chunk_index, title, text, text_sha256) "
                 "SELECT id, 0, title, title, 'x' FROM documents WHERE doc_type = 'txt'")


def test_on_postgresql_the_collection_lookup_starts_from_the_chunks_with_stale_statistics(
    make_app: Callable[..., flask.Flask], postgres_server: PostgresServer
) -> None:
    """Notes stored after the last ANALYZE (a memory beside a large corpus stays under autovacuum's 10 %)
    are not in PostgreSQL's statistics: its planner took them for none and walked them all from the index of
    doc_type. The lookup starts from the given chunks whatever the statistics say (store/adjacent.py)."""
    url = postgres_server.new_database()
    client = make_app(database_url=url).test_client()
    add_note(client, "the schema is made", tags=["collection:diary"])
    with psycopg.connect(url, autocommit=True) as conn:
        copy_in_files(conn)
        conn.execute("ANALYZE")
        notes = [int(add_note(client, f"note {i} of the diary", tags=["collection:diary"])["chunks"][0]["id"])
                 for i in range(40)]
        # The first chunk is the first note's, then 59 of the files'.
        first, *files = [int(row[0]) for row in conn.execute("SELECT id FROM chunks ORDER BY id LIMIT 60").fetchall()]
        recording = Recording(conn)
        assert adjacent.collection_notes(recording, [*notes, first, *files], "%s") == {*notes, first}
        [(sql, params)] = recording.statements
        plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN {sql}", params).fetchall())
    assert "documents_doc_type" not in plan and "chunks_pkey" in plan


def test_on_postgresql_the_neighbours_are_read_from_each_notes_window_with_stale_statistics(
    make_app: Callable[..., flask.Flask], postgres_server: PostgresServer
) -> None:
    """A memory stored beside a corpus copied in before the last ANALYZE: the statistics do not know the
    search's tag, so it looked rare, and the planner read every note holding it for each anchor and side
    (182 ms a search on LoCoMo beside 100k chunks) instead of the SPAN submissions around it. The window is
    read first whatever the statistics say (store/adjacent.py): the pages read stay those of the windows."""
    url = postgres_server.new_database()
    client = make_app(database_url=url).test_client()
    add_note(client, "the schema is made", tags=["collection:diary"])
    with psycopg.connect(url, autocommit=True) as conn:
        copy_in_files(conn)
        conn.execute("INSERT INTO document_tags (document_id, tag) SELECT id, 'corpus' FROM documents "
                     "WHERE doc_type = 'txt'")
        conn.execute("TRUNCATE jobs CASCADE")  # as after `kb-bridge migrate`, which copies no job
        conn.execute("VACUUM (ANALYZE)")  # as its last step
        for table in ("documents", "document_tags", "jobs", "chunks"):
            conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")  # the statistics stay stale
    jobs = [client.post(f"{API}/jobs", json={"text": f"note {i} of the diary", "tags": ["collection:diary", "day:x"]})
            for i in range(400)]
    for job in jobs:
        assert wait_job(client, job.get_json()["id"])["status"] == "done"
    with psycopg.connect(url, autocommit=True) as conn:
        anchors = [int(row[0]) for row in conn.execute(
            "SELECT c.id FROM chunks c JOIN document_tags t ON t.document_id = c.document_id "
            "WHERE t.tag = 'day:x' ORDER BY c.id LIMIT 20 OFFSET 100").fetchall()]
        recording = Recording(conn)
        found = adjacent.adjacent_notes(recording, anchors, where_sql(DocumentFilter(tags=("day:x",))), "%s", 2)
        assert len(found) == 20 and all(len(beside) == 4 for beside in found.values())
        sql, params = next((sql, params) for sql, params in recording.statements if "FROM jobs a" in sql)
        [[plan]] = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params).fetchone()
    # 20 anchors, 4 windows each: about 2,200 pages with the window read first, 223,500 when the planner
    # started from the 400 notes holding the tag for each window.
    assert plan["Plan"]["Shared Hit Blocks"] < 10_000, plan["Plan"]["Shared Hit Blocks"]


def test_collections_are_found_in_a_database_of_a_linguistic_collation(
    make_app: Callable[..., flask.Flask], linguistic_database_url: str
) -> None:
    """The official PostgreSQL image makes its databases in en_US.UTF-8, which sorts letters before
    punctuation: the range from "collection:" to "collection;" that the lookups used held no tag there, so a
    memory had no neighbours and no vector share, without an error (store/adjacent.py)."""
    app = make_app(database_url=linguistic_database_url)
    client = app.test_client()
    neighbours_are_the_notes_submitted_beside_them(app, client)
    collection_notes_are_the_notes_kept_in_a_collection(app, client)


@pytest.mark.sqlite_only
@pytest.mark.parametrize(("few_notes", "first_step"), [
    (1000, "SEARCH d USING COVERING INDEX documents_doc_type"),  # 3 notes: walk them
    (2, "SEARCH c USING INTEGER PRIMARY KEY"),  # "many" notes: read the rows of the chunks asked about
])
def test_the_collection_lookup_walks_the_smaller_side(app: flask.Flask, client: FlaskClient,
                                                      monkeypatch: pytest.MonkeyPatch, few_notes: int,
                                                      first_step: str) -> None:
    """SQLite's planner does not know how many notes there are: with 100 ids it walked every note's chunks
    (3 ms a lookup among SciFact's 5,183 notes), and told to start from the chunks it read each chunk's row
    (1.9 ms a search among a million chunks of files). The store counts the notes, up to FEW_NOTES, and
    says which side to walk (docs/benchmarks.md, "Retrieval quality (SciFact)")."""
    kept = int(add_note(client, "a note of the diary", tags=["collection:diary"])["chunks"][0]["id"])
    for text in ("a note in no collection", "another loose note"):
        add_note(client, text)
    monkeypatch.setattr(adjacent, "FEW_NOTES", few_notes)
    store = engine_of(app).store
    conn = store.db.connection()  # this thread's, which the lookup below uses
    with traced(conn) as statements:
        assert store.collection_notes([kept, *range(kept + 1, kept + 100)]) == {kept}
    assert plan_start(conn, statements, "SELECT c.id").startswith(first_step)


CONVERSATION = (
    "Mel: The kids play football in the park every Sunday.",
    "Caroline: Do you play any musical instruments, Mel?",
    "Mel: Yes, the clarinet, ever since I was a child.",
    "Mel: We saw a play at the theatre with the kids.",
    "Mel: Music at the festival was too loud for me.",
)


@pytest.mark.parametrize(("weight", "lexical_weight"), [(0.25, 0.0), (0.0, 0.4), (0.0, 0.0)])
def test_the_answer_after_a_question_is_found_through_its_neighbour(
    make_app: Callable[..., flask.Flask], model: object, weight: float, lexical_weight: float
) -> None:
    """Either neighbour term alone (the neighbour's whole score, or its BM25 share) finds the answer."""
    client = make_app(model=model, neighbour_weight=weight, neighbour_lexical_weight=lexical_weight).test_client()
    ids = [add_note(client, text, tags=["collection:memory"])["id"] for text in CONVERSATION]
    response = client.post(f"{API}/search", json={"query": "which musical instruments does Mel play?",
                                                  "mode": "hybrid", "top_n": 5})
    ranked = [hit["document_id"] for hit in response.json["results"]]
    answer_rank = ranked.index(ids[2])
    if weight or lexical_weight:
        assert answer_rank <= 1, ranked
    else:
        assert answer_rank > 1, ranked  # the corpus makes the answer hard to find without its neighbour


ASIDE = (
    "Mel: The kids play football in the park every Sunday.",
    "Caroline: Do you play any musical instruments, Mel?",
    "Caroline: Sorry, the dog is barking at the door again.",
    "Mel: Yes, the clarinet, ever since I was a child.",
    "Mel: We saw a play at the theatre with the kids.",
    "Mel: Music at the festival was too loud for me.",
)


@pytest.mark.parametrize("reach", [1, 2])
def test_an_answer_two_notes_after_the_question_is_found_with_a_reach_of_two(
    make_app: Callable[..., flask.Flask], model: object, reach: int
) -> None:
    """KB_ENGINE_NEIGHBOUR_REACH: an aside between the question and its answer."""
    client = make_app(model=model, neighbour_reach=reach).test_client()
    ids = [add_note(client, text, tags=["collection:memory"])["id"] for text in ASIDE]
    response = client.post(f"{API}/search", json={"query": "which musical instruments does Mel play?",
                                                  "mode": "hybrid", "top_n": 6})
    ranked = [hit["document_id"] for hit in response.json["results"]]
    # Reach 1: the two other notes of Mel that share a word with the question pass the answer; reach 2 gives
    # it half its context from the question two notes before.
    if reach == 2:
        assert ranked.index(ids[3]) <= 2, ranked
    else:
        assert ranked.index(ids[3]) >= 4, ranked


def test_the_first_results_do_not_change_with_top_n(make_app: Callable[..., flask.Flask], model: object) -> None:
    """KB_ENGINE_NEIGHBOUR_ANCHORS: a fixed number of candidates look for neighbours, so asking for more
    results only adds results; the first ones, and their scores, stay (up to that many results). When the
    anchors grew with top_n, a note whose neighbours ranked just below the first page got its context only
    on a longer page, and then passed the first results."""
    client = make_app(model=model, neighbour_anchors=12).test_client()
    people, things = ("Mel", "Caroline", "Jon"), ("the clarinet", "the garden", "a marathon", "the piano",
                                                  "a pottery class", "the violin", "a road trip")
    for n in range(42):
        add_note(client, f"{people[n % 3]}: last week was about {things[n % 7]} and {things[(n * 3 + 1) % 7]}.",
                 tags=["collection:memory"])
    for query in ("which instruments does Mel play?", "did Jon run a marathon?", "who took a pottery class?",
                  "what grows in the garden?"):
        pages = [client.post(f"{API}/search", json={"query": query, "mode": "hybrid", "top_n": top_n}).json["results"]
                 for top_n in range(1, 13)]
        longest = [(hit["chunk_id"], hit["score"]) for hit in pages[-1]]
        for page in pages:
            assert [(hit["chunk_id"], hit["score"]) for hit in page] == longest[: len(page)], query


def test_diversity_lets_a_different_result_pass_a_near_copy() -> None:
    unit = np.eye(3, dtype=np.float32)
    near_copy = np.array([0.99, 0.141, 0.0], dtype=np.float32)
    vectors = {1: unit[0], 2: near_copy / np.linalg.norm(near_copy), 3: unit[2]}

    def vectors_of(chunk_ids: Sequence[int]) -> tuple[list[int], np.ndarray]:
        found = [chunk_id for chunk_id in chunk_ids if chunk_id in vectors]
        return found, np.stack([vectors[chunk_id] for chunk_id in found])

    ranked = [(1, 0.80), (2, 0.78), (3, 0.72), (4, 0.60)]  # 4 has no vector
    assert [c for c, _ in diversify(ranked, 3, 0.1, vectors_of)] == [1, 3, 2, 4]
    assert diversify(ranked, 3, 0.1, vectors_of)[1] == (3, 0.72)  # scores stay the fused ones
    assert diversify(ranked, 3, 0.0, vectors_of) == ranked
    assert [c for c, _ in diversify(ranked, 3, 0.01, vectors_of)] == [1, 2, 3, 4]  # a small penalty: fused order
