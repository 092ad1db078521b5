"""3.11: every search hit's `snippet`, the passage of its text that matched, with the matched words' offsets
(in characters); a hit whose text holds none of the query's words gets its opening sentence."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from kb_bridge.local_engine.search.snippets import SNIPPET_CHARS, opening_sentence
from kb_bridge.local_engine.store.base import Passage
from kb_bridge.testing.engine_app import API, Sample, add_note

# The engine API suite: every test here runs once per store (tests/engine/conftest.py).
pytestmark = pytest.mark.both_stores

FILLER = "Café crème and naïve résumés fill this paragraph with words of no interest to anyone. " * 5


def hits(client: FlaskClient, **body: object) -> list[dict]:
    response = client.post(f"{API}/search", json=body)
    assert response.status_code == 200, response.json
    return list(response.json["results"])


def marked(hit: dict) -> list[str]:
    snippet = hit["snippet"]
    return [snippet["text"][start:end] for start, end in snippet["highlights"]]


def test_the_snippet_is_the_passage_that_matched_with_its_words_marked(client: FlaskClient) -> None:
    text = FILLER + "To change branches, use git switch; switching keeps your work. " + FILLER
    add_note(client, text, title="Version control")
    [hit] = hits(client, query="git switch", mode="fts")
    snippet = hit["snippet"]
    assert set(snippet) == {"text", "start", "highlights"}
    # The passage lies in the middle (beyond the accented filler) and is a slice of the hit's text.
    assert snippet["start"] > SNIPPET_CHARS // 2
    assert hit["text"][snippet["start"]:snippet["start"] + len(snippet["text"])] == snippet["text"]
    assert len(snippet["text"]) <= SNIPPET_CHARS + 20
    # Offsets count characters, so they land on the words even after "Café" and "naïve" (two bytes each).
    assert marked(hit) == ["git", "switch", "switching"]
    assert all(end > start for start, end in snippet["highlights"])


def test_a_hit_with_none_of_the_words_in_its_text_gets_its_opening_sentence(client: FlaskClient) -> None:
    add_note(client, "Vinegar loosens the scale. Rinse twice before the next boil.", title="Kettle")
    [hit] = hits(client, query="kettle", mode="fts")  # found by its title alone
    assert hit["snippet"] == {"text": "Vinegar loosens the scale.", "start": 0, "highlights": []}


def test_stemming_and_case_match_as_the_index_does(client: FlaskClient) -> None:
    add_note(client, "Pensions are REVALUED yearly; the rise follows prices.")
    [hit] = hits(client, query="pension revalue", mode="fts")
    assert marked(hit) == ["Pensions", "REVALUED"]


def test_the_opening_sentence_is_cut_at_a_space_when_long() -> None:
    words = "word " * 100
    sentence = opening_sentence(words, max_chars=42)
    assert sentence.text == "word " * 7 + "word" and sentence.start == 0 and sentence.highlights == ()
    assert opening_sentence("Heading\n\nBody text.").text == "Heading"
    assert opening_sentence("\n  Indented. Next.") == Passage(text="Indented.", start=3, highlights=())
    assert opening_sentence("Is it? Yes.").text == "Is it?"


# --- with the real embedding model -------------------------------------------------------------------


def test_vector_and_hybrid_hits_carry_snippets(vclient: FlaskClient) -> None:
    sample = Sample()
    add_note(vclient, sample.cooking)
    add_note(vclient, sample.astronomy)
    # No word in common with the cooking note: it is found by meaning and gets its opening sentence.
    top = hits(vclient, query="how to make a loaf at home", mode="vector", top_n=1)[0]
    assert top["snippet"] == {"text": sample.cooking, "start": 0, "highlights": []}
    # A word in common marks it, whichever signal ranked the hit.
    for mode in ("vector", "hybrid"):
        found = {hit["text"]: marked(hit) for hit in hits(vclient, query="baking bread overnight", mode=mode)}
        assert found[sample.cooking] == ["bake", "bread", "overnight", "bake"]
        assert found[sample.astronomy] == []
