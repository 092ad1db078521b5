"""POST /search in every mode, filters before the cut, query sanitising; related chunks."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from pathlib import Path

import flask
import pytest
from flask.testing import FlaskClient

from kb_bridge.local_engine.app import engine_of
from kb_bridge.local_engine.clock import now_iso
from kb_bridge.local_engine.store.base import DocumentFilter
from kb_bridge.local_engine.store.sqlite import documents as sqlite_documents
from kb_bridge.local_engine.store.text_index import TextIndex

from kb_bridge.testing.engine_app import API, Sample, add_note, error_code, upload, wait_job
from kb_bridge.testing.sqlite_plans import plan_start, traced

# The engine API suite: every test here runs once per store (tests/engine/conftest.py).
pytestmark = pytest.mark.both_stores


def search(client: FlaskClient, **body: object) -> dict:
    response = client.post(f"{API}/search", json=body)
    assert response.status_code == 200, response.json
    return response.json


def test_fts_ranks_the_matching_document_first_with_stemming(client: FlaskClient) -> None:
    sample = Sample()
    pension = add_note(client, sample.pension)
    add_note(client, sample.cooking)
    add_note(client, sample.astronomy)
    result = search(client, query="revaluing pensions", mode="fts")
    assert result["mode"] == "fts" and result["query"] == "revaluing pensions"
    assert isinstance(result["took_ms"], float)
    assert [r["document_id"] for r in result["results"]] == [pension["id"]]
    hit = result["results"][0]
    assert hit["score"] > 0 and hit["doc_type"] == "note" and hit["chunk_index"] == 0


def test_title_hits_rank_above_body_hits(client: FlaskClient) -> None:
    body_only = add_note(client, "Otters are mentioned once in this body among many other words here.", title="Rivers")
    in_title = add_note(client, "A text about rivers and their animals among many other words here.", title="Otters")
    results = search(client, query="otters", mode="fts")["results"]
    assert [r["document_id"] for r in results] == [in_title["id"], body_only["id"]]


@pytest.mark.parametrize("query", ['"unbalanced', "a AND (b OR", "NEAR(x y)", "*", "col:umn", "-neg ^start",
                                   "'; DROP TABLE chunks; --", "…", "!!!"])
def test_fts_syntax_in_queries_never_errors(client: FlaskClient, query: str) -> None:
    add_note(client, "col umn neg start x y b")
    result = search(client, query=query, mode="fts")
    assert isinstance(result["results"], list)


def test_a_query_of_only_punctuation_returns_nothing(client: FlaskClient) -> None:
    add_note(client, "something")
    assert search(client, query="?!.,;", mode="hybrid")["results"] == []


def test_query_words_are_stemmed_without_stopwords_or_syntax(tmp_path: Path) -> None:
    index = TextIndex(tmp_path / "text", database="test")
    assert index.tokens('what is "BM25"* ranking?') == ["bm25", "rank"]
    assert index.tokens("to be or not to be") == ["to", "be", "or", "not"]
    assert index.tokens("((:))") == []


def test_tag_filter_applies_before_top_n(client: FlaskClient) -> None:
    # Five untagged notes rank higher for "heron" than the one tagged note; top_n=1 must still find it.
    for i in range(5):
        add_note(client, f"heron heron heron heron story {i}")
    tagged = add_note(client, "one heron among many other words in a long sentence", tags=["collection:memory", "b"])
    add_note(client, "heron heron", tags=["collection:memory"])  # has only one of the two tags
    for mode in ("fts", "hybrid"):
        results = search(client, query="heron", top_n=1, tags=["collection:memory", "b"], mode=mode)["results"]
        assert [r["document_id"] for r in results] == [tagged["id"]]
        assert results[0]["tags"] == ["b", "collection:memory"]


@pytest.mark.parametrize("filter_idf", [True, False])
def test_a_filtered_search_weighs_words_by_their_idf_within_the_filter(
    make_app: Callable[..., flask.Flask], filter_idf: bool
) -> None:
    """KB_ENGINE_FILTER_IDF (on by default): within the collection "alice" names nearly every note and tells
    nothing apart, while over the whole engine it is the rare word of the query (store/text_index.py)."""
    client = make_app(filter_idf=filter_idf).test_client()
    memory = ["collection:alice"]
    named = add_note(client, "Alice said Alice would call Alice back about the weather", tags=memory)
    clarinet = add_note(client, "played my clarinet at the concert tonight", tags=memory)
    for n in range(4):
        add_note(client, f"Alice talked about topic {n}", tags=memory)
        add_note(client, f"clarinet reed review {n}", tags=["shop"])
        add_note(client, f"clarinet case review {n}", tags=["shop"])
    results = search(client, query="Alice clarinet", mode="fts", tags=memory)["results"]
    assert results[0]["document_id"] == (clarinet if filter_idf else named)["id"]


@pytest.mark.sqlite_only
@pytest.mark.parametrize(("few_documents", "driving", "first_steps"), [
    # From the list of the rarer tag's documents, for a page of documents and for a vector search's chunks.
    (10_000, "rare", ("SEARCH d USING INTEGER PRIMARY KEY", "SEARCH d USING INTEGER PRIMARY KEY")),
    # No tag under the threshold: walk the documents (newest first) or the chunks, looking each tag up.
    (1, None, ("SCAN d USING INDEX documents_updated_at", "SCAN c")),
])
def test_a_tag_filter_starts_from_its_rarest_tag(app: flask.Flask, client: FlaskClient,
                                                 monkeypatch: pytest.MonkeyPatch, few_documents: int,
                                                 driving: str | None, first_steps: tuple[str, str]) -> None:
    """SQLite's planner knows no tag's count: for a tag filter it walked every document and looked the tag up
    for each (370 ms a search among a million chunks for a tag of 419 notes). The store counts each tag's
    documents up to FEW_DOCUMENTS and starts from the rarest under it (docs/benchmarks.md, "Memory beside
    a million chunks of files")."""
    for text in ("the first common note", "the second common note"):
        add_note(client, text, tags=["common"])
    rare = add_note(client, "the rare note", tags=["common", "rare"])
    add_note(client, "a note with no tag")
    monkeypatch.setattr(sqlite_documents, "FEW_DOCUMENTS", few_documents)
    where = DocumentFilter(tags=("common", "rare"))
    store = engine_of(app).store
    conn = store.db.connection()  # this thread's, which the store's reads below use
    assert sqlite_documents.driving_tag(conn, where) == driving
    with traced(conn) as statements:
        found, total = store.list_documents(where, 10, 0)
        chunk_ids = sqlite_documents.matching_chunk_ids(conn, where)
    assert [d["id"] for d in found] == [rare["id"]] and total == 1
    assert chunk_ids == [chunk["id"] for chunk in client.get(f"{API}/documents/{rare['id']}").json["chunks"]]
    for prefix, first_step in zip(("SELECT d.id, d.title", "SELECT c.id FROM chunks c"), first_steps, strict=True):
        assert plan_start(conn, statements, prefix).startswith(first_step)


@pytest.mark.sqlite_only
@pytest.mark.parametrize(("few_documents", "first_step"), [
    (10_000, "SEARCH d USING INDEX documents_created_at"),  # one match: found by the time bound, then sorted
    (1, "SCAN d USING INDEX documents_updated_at"),  # "many": walk the newest first until a page is full
])
def test_a_listing_with_few_matches_finds_them_by_its_filter(app: flask.Flask, client: FlaskClient,
                                                             monkeypatch: pytest.MonkeyPatch, few_documents: int,
                                                             first_step: str) -> None:
    """Walking the newest documents first and checking a time bound on each took 414 ms for a bound that none
    of a million documents met; the listing counts its matches first, and with few it reads them by the
    filter's index and sorts them."""
    first = add_note(client, "the first note", created_at="2020-03-01")
    for text in ("a later note", "the latest note"):
        add_note(client, text)
    monkeypatch.setattr(sqlite_documents, "FEW_DOCUMENTS", few_documents)
    store = engine_of(app).store
    conn = store.db.connection()
    with traced(conn) as statements:
        found, total = store.list_documents(DocumentFilter(created_before="2021-01-01T00:00:00.000Z"), 10, 0)
    assert [d["id"] for d in found] == [first["id"]] and total == 1
    assert plan_start(conn, statements, "SELECT d.id, d.title").startswith(first_step)


@pytest.mark.sqlite_only
def test_a_listing_by_tags_alone_is_counted_in_the_tags_index(app: flask.Flask, client: FlaskClient) -> None:
    """Counting the documents of a tag most of a million documents hold took 265 ms through the documents,
    50 ms in the tags' index; the total is the same."""
    both = add_note(client, "tern", tags=["birds", "coast"])
    add_note(client, "gull", tags=["birds"])
    add_note(client, "crab", tags=["coast"])
    store = engine_of(app).store
    conn = store.db.connection()
    for tags, expected in ((("birds",), 2), (("birds", "coast"), 1), (("coast", "birds", "coast"), 1)):
        with traced(conn) as statements:
            found, total = store.list_documents(DocumentFilter(tags=tags), 1, 0)
        assert total == expected and len(found) == 1
        assert plan_start(conn, statements, "SELECT COUNT(*)").startswith("SEARCH t USING COVERING INDEX")
    found, total = store.list_documents(DocumentFilter(tags=("birds", "coast")), 10, 0)
    assert [d["id"] for d in found] == [both["id"]] and total == 1


def test_doc_type_filter(client: FlaskClient) -> None:
    add_note(client, "kestrel notes")
    job = wait_job(client, upload(client, "k.md", b"# Kestrel\n\nkestrel in markdown").json["id"])
    results = search(client, query="kestrel", doc_type="md")["results"]
    assert [r["document_id"] for r in results] == [job["document_id"]]


def test_top_n_is_honoured(client: FlaskClient) -> None:
    for i in range(4):
        add_note(client, f"falcon {i}")
    assert len(search(client, query="falcon", top_n=3)["results"]) == 3


@pytest.mark.parametrize(
    "body",
    [{}, {"query": ""}, {"query": "x" * 4001}, {"query": 5}, {"query": "x", "top_n": 0},
     {"query": "x", "top_n": 101}, {"query": "x", "top_n": True}, {"query": "x", "top_n": "3"},
     {"query": "x", "mode": "semantic"}, {"query": "x", "tags": "a"}, {"query": "x", "fts_only": "yes"}],
)
def test_search_validation(client: FlaskClient, body: dict[str, object]) -> None:
    response = client.post(f"{API}/search", json=body)
    assert response.status_code == 422 and error_code(response) == "validation_error"


def test_without_vectors_every_mode_answers_as_fts(client: FlaskClient) -> None:
    add_note(client, "buzzard")
    for mode in ("hybrid", "vector", "fts"):
        result = search(client, query="buzzard", mode=mode)
        assert result["mode"] == "fts" and len(result["results"]) == 1


def test_related_without_vectors_is_409(client: FlaskClient) -> None:
    note = add_note(client, "osprey")
    response = client.get(f"{API}/chunks/{note['chunks'][0]['id']}/related")
    assert response.status_code == 409 and error_code(response) == "conflict"
    assert client.get(f"{API}/chunks/9999/related").status_code == 404


# --- with the real embedding model -------------------------------------------------------------------


def test_status_with_model(vclient: FlaskClient) -> None:
    status = vclient.get(f"{API}/status").json
    assert status["model"]["name"] == "all-MiniLM-L6-v2" and status["model"]["dim"] == 384
    assert status["model"]["precision"]["documents"] in ("float32", "bfloat16", "int8")
    assert status["search_modes"] == ["hybrid", "fts", "vector"]


def test_vector_search_is_semantic(vclient: FlaskClient) -> None:
    sample = Sample()
    add_note(vclient, sample.pension)
    cooking = add_note(vclient, sample.cooking)
    add_note(vclient, sample.astronomy)
    # No word in common with the cooking note: only meaning can find it.
    result = search(vclient, query="how to make a loaf at home", mode="vector", top_n=3)
    assert result["mode"] == "vector"
    assert result["results"][0]["document_id"] == cooking["id"]
    assert result["results"][0]["score"] > result["results"][1]["score"]
    assert search(vclient, query="how to make a loaf at home", mode="fts")["results"] == []
    hybrid = search(vclient, query="how to make a loaf at home")
    assert hybrid["mode"] == "hybrid" and hybrid["results"][0]["document_id"] == cooking["id"]


def test_hybrid_combines_both_signals(vclient: FlaskClient) -> None:
    exact = add_note(vclient, "Error code ZX-4471 appears when the disk quota is exceeded.")
    semantic = add_note(vclient, "The storage space allowance ran out, so writes were refused.")
    add_note(vclient, "A recipe for tomato soup with basil.")
    results = search(vclient, query="ZX-4471 storage allowance exhausted", top_n=3)["results"]
    top_two = {r["document_id"] for r in results[:2]}
    assert top_two == {exact["id"], semantic["id"]}


def test_vector_search_filters_before_top_n(vclient: FlaskClient) -> None:
    sample = Sample()
    add_note(vclient, sample.cooking)
    target = add_note(vclient, sample.astronomy, tags=["collection:memory"])
    results = search(vclient, query="baking bread", mode="vector", top_n=1, tags=["collection:memory"])["results"]
    assert [r["document_id"] for r in results] == [target["id"]]
    assert search(vclient, query="baking bread", mode="vector", tags=["absent"])["results"] == []


def test_related_chunks(vclient: FlaskClient) -> None:
    sample = Sample()
    long_cooking = "\n\n".join([sample.cooking] * 1 + ["Knead the dough again and shape the loaf before baking."])
    source = add_note(vclient, long_cooking)
    other = add_note(vclient, "Bread baking tips: a hot oven and a steamy start give a crisp crust.")
    add_note(vclient, sample.astronomy)
    chunk_id = source["chunks"][0]["id"]
    results = vclient.get(f"{API}/chunks/{chunk_id}/related", query_string={"top_n": 5}).json["results"]
    assert results[0]["document_id"] == other["id"]
    assert all(r["document_id"] != source["id"] for r in results)
    assert all(r["chunk_id"] != chunk_id for r in results)
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    one = vclient.get(f"{API}/chunks/{chunk_id}/related", query_string={"top_n": 1}).json["results"]
    assert len(one) == 1
    assert vclient.get(f"{API}/chunks/{chunk_id}/related", query_string={"top_n": 0}).status_code == 422


def test_related_within_tags_finds_the_filters_chunks_behind_nearer_ones_and_says_so(vclient: FlaskClient) -> None:
    """3.16: `…/related?tag=` ranks only the chunks of documents with every tag, and the answer names the tags it
    applied (an engine before ignored the parameter, and a client limited to a collection had to ask for more)."""
    source = add_note(vclient, "Knead the bread dough, let it rise, then bake the loaf.", tags=["collection:a"])
    nearer = [add_note(vclient, f"Bread dough needs kneading and a warm place to rise ({n}).", tags=["collection:a"])
              for n in range(3)]
    farther = add_note(vclient, "Jupiter's moons include Io and Europa.", tags=["collection:b", "space"])
    chunk_id = source["chunks"][0]["id"]
    plain = vclient.get(f"{API}/chunks/{chunk_id}/related", query_string={"top_n": 2}).json
    assert "tags" not in plain and {r["document_id"] for r in plain["results"]} <= {n["id"] for n in nearer}
    within = vclient.get(f"{API}/chunks/{chunk_id}/related", query_string=[("top_n", 2), ("tag", "collection:b"),
                                                                          ("tag", "space")]).json
    assert within["tags"] == ["collection:b", "space"]
    assert [r["document_id"] for r in within["results"]] == [farther["id"]]
    none = vclient.get(f"{API}/chunks/{chunk_id}/related", query_string=[("tag", "collection:b"), ("tag", "absent")])
    assert none.json["results"] == [] and none.json["tags"] == ["collection:b", "absent"]
    refused = vclient.get(f"{API}/chunks/{chunk_id}/related", query_string={"tag": "tab\there"})
    assert refused.status_code == 422 and refused.json["error"]["field"] == "tag"


def test_related_same_document(make_app: Callable[..., flask.Flask], model: object) -> None:
    client = make_app(model=model, chunk_chars=200, chunk_overlap=0).test_client()
    text = "\n\n".join([
        "Bread needs flour, water, salt and yeast; knead it well and let it rise.",
        "Sourdough bread uses a starter instead of yeast, fed with flour and water.",
        "Jupiter's moons include Io, Europa, Ganymede and Callisto.",
    ] * 2)
    note = add_note(client, text)
    assert note["chunk_count"] >= 2
    chunk_id = note["chunks"][0]["id"]
    response = client.get(f"{API}/chunks/{chunk_id}/related", query_string={"same_document": "true"})
    results = response.json["results"]
    assert results and all(r["document_id"] == note["id"] and r["chunk_id"] != chunk_id for r in results)
    assert client.get(f"{API}/chunks/{chunk_id}/related").json["results"] == []


@pytest.mark.parametrize("word", ["İstanbul", "ΟΔΟΣ", "ΣΊΣΥΦΟΣ"])
def test_a_word_searched_as_a_document_wrote_it_finds_that_document(client: FlaskClient, word: str) -> None:
    """Python's lower() made "i̇stanbul" of the query's "İstanbul" (the analyzer then split off its combining
    dot) and a final sigma of "ΟΔΟΣ"'s, which the index, lowering letter by letter, never holds."""
    note = add_note(client, f"The ferry timetable for {word} changes in May.")
    hits = search(client, query=word, mode="fts")["results"]
    assert [hit["document_id"] for hit in hits] == [note["id"]]
    start, end = hits[0]["snippet"]["highlights"][0]
    assert hits[0]["snippet"]["text"][start:end] == word


@pytest.mark.parametrize(("written", "searched"), [
    ("ﬁle", "file"),  # the ligature ﬁ, as PDF text extraction gives it
    ("file", "ﬁle"),
    (unicodedata.normalize("NFD", "résumé"), "résumé"),  # e and a combining accent (macOS, some editors)
    ("résumé", unicodedata.normalize("NFD", "résumé")),
    ("Ｔｏｋｙｏ", "Tokyo"),  # full-width letters
])
def test_a_word_written_in_another_unicode_form_is_found_and_marked_as_stored(
        client: FlaskClient, written: str, searched: str) -> None:
    """Two spellings of one word in different characters did not find each other: NFD's accent cut the word
    in two, and a ligature or a full-width letter was a letter of its own. The index holds their NFKC form;
    the snippet marks the word as the document stored it."""
    text = f"Before the {written} review, the team met twice and wrote notes."
    note = add_note(client, text)
    hits = search(client, query=searched, mode="fts")["results"]
    assert [hit["document_id"] for hit in hits] == [note["id"]]
    snippet = hits[0]["snippet"]
    assert text[snippet["start"]:snippet["start"] + len(snippet["text"])] == snippet["text"]
    start, end = snippet["highlights"][0]
    assert snippet["text"][start:end] == written


@pytest.mark.parametrize("mode", ["fts", "vector", "hybrid"])
def test_a_hit_moved_out_of_the_filter_while_the_search_runs_is_left_out(
        vector_app: flask.Flask, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """A search ranks in the indexes, then reads its hits from the database: a document re-tagged in between
    (another request, another replica) came back with its new tags under the old filter, so a token limited to
    collection:a was shown a document now in collection:b."""
    client = vector_app.test_client()
    note = add_note(client, "Kingfishers nest in burrows dug into sandy river banks.", tags=["collection:a"])
    store = engine_of(vector_app).store
    read = store.get_chunks

    def moved_first(chunk_ids: list[int]) -> dict[int, dict[str, object]]:
        monkeypatch.setattr(store, "get_chunks", read)
        store.patch_tags(note["id"], ["collection:b"], ["collection:a"], None, now_iso())
        return read(chunk_ids)

    monkeypatch.setattr(store, "get_chunks", moved_first)
    hits = search(client, query="kingfishers river banks", mode=mode, tags=["collection:a"])["results"]
    assert hits == []
    assert store.get_chunks([note["chunks"][0]["id"]])[note["chunks"][0]["id"]]["tags"] == ["collection:b"]
