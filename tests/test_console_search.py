"""The console's search page against a faked engine: the filters reach the engine as kb_search sends them,
hits are grouped by document with their scores, the snippet's matched words are marked and its text escaped,
the count says what it counts, the pages keep the filters, and a bad filter is shown beside the form (the
browser tests in tests/e2e/test_console_search.py run it against the real engine)."""

from __future__ import annotations

import re
from html import unescape

import responses
from flask.testing import FlaskClient

from kb_bridge.runtime import Bridge
from kb_bridge.testing.fake_engine import API, body, calls_to, chunk, search_response
from kb_bridge.web.console.search import PAGE, TOP, Filters, passage
from kb_bridge.web.ops import create_web_app

from tests.test_console_app import signed_in


def console(bridge: Bridge, engine: responses.RequestsMock) -> FlaskClient:
    engine.get(f"{API}/tags", json={"tags": [{"name": "collection:memory", "documents": 3},
                                             {"name": "collection:documents", "documents": 9}]})
    return signed_in(create_web_app(bridge).test_client())


def text_of(html: str) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html)))


def test_every_filter_reaches_the_engine(bridge: Bridge, engine: responses.RequestsMock) -> None:
    client = console(bridge, engine)
    engine.post(f"{API}/search", json={**search_response(mode="fts"), "time_filters": {}})
    page = client.get("/ui/search", query_string={"q": "kettle", "collection": "memory", "mode": "fts",
                                                  "tags": "home, chores ,", "time_field": "updated",
                                                  "since": "2026-04-01", "until": "2026-04-30"})
    assert page.status_code == 200
    sent = body(calls_to(engine, "POST", "/search")[0])
    assert sent == {"query": "kettle", "top_n": TOP, "mode": "fts", "tags": ["collection:memory", "home", "chores"],
                    "updated_after": "2026-04-01T00:00:00.000Z", "updated_before": "2026-05-01T00:00:00.000Z"}
    html = page.get_data(as_text=True)
    # The form shows the search back as given.
    assert '<option value="memory" selected>' in html and '<option value="fts" selected>' in html
    assert 'value="home, chores ,"' in html and 'value="2026-04-01"' in html
    assert "No hits for “kettle” (fts search)" in text_of(html)


def test_hits_are_grouped_by_document_with_scores_and_marked_snippets(
    bridge: Bridge, engine: responses.RequestsMock,
) -> None:
    client = console(bridge, engine)
    text = "Intro. <b>Descale</b> the kettle with vinegar & rinse."
    engine.post(f"{API}/search", json=search_response(
        chunk(1, 7, text=text, score=0.91234, title="Kettle", chunk_index=2,
              snippet={"text": text[7:], "start": 7, "highlights": [[19, 25]]}),
        chunk(2, 8, text="Other text", score=0.5, title="Other"),
        chunk(3, 7, text="Second kettle passage", score=0.25, title="Kettle",
              snippet={"text": "Second kettle passage", "start": 0, "highlights": [[7, 13]]}),
    ))
    html = client.get("/ui/search?q=kettle").get_data(as_text=True)
    # Escaped, never injected; the match alone is marked, with an ellipsis where the text goes on before.
    assert "…&lt;b&gt;Descale&lt;/b&gt; the <mark>kettle</mark> with vinegar &amp; rinse." in html
    assert "<b>" not in html
    assert "Second <mark>kettle</mark> passage" in html
    assert "2 documents in the top 3 hits for “kettle” (hybrid search)" in text_of(html)
    # Document 7 first (its best hit is first), with both of its hits and their scores; then document 8.
    first, second = html.split('<li>\n    <a href="/ui/documents/')[1:3]
    assert first.startswith("7") and second.startswith("8")
    assert "score 0.912" in first and "score 0.250" in first and "passage 3" in first and "2 hits" in first
    assert "score 0.500" in second and "Other text" in second  # an engine without snippets: the text's start


def test_pages_keep_the_filters(bridge: Bridge, engine: responses.RequestsMock) -> None:
    client = console(bridge, engine)
    documents = PAGE + 3
    engine.post(f"{API}/search", json={**search_response(
        *(chunk(100 + n, n + 1, title=f"Doc {n + 1}", score=1 - n / 100) for n in range(documents))),
        "time_filters": {}})
    first = client.get("/ui/search?q=plover&mode=vector&tags=birds&since=7d").get_data(as_text=True)
    assert f"{documents} documents in the top {documents} hits for “plover”, showing 1–{PAGE}" in text_of(first)
    assert "Previous page" not in first and "Page 1 of 2" in first
    link = re.search(r'href="([^"]+)" rel="next"', first)
    assert link is not None
    next_url = unescape(link.group(1))
    assert next_url == "/ui/search?q=plover&mode=vector&tags=birds&time_field=created&since=7d&page=2"
    second = client.get(next_url).get_data(as_text=True)
    assert f"showing {PAGE + 1}–{documents}" in text_of(second) and "Doc 13" in second and "Doc 1<" not in second
    assert 'rel="prev"' in second and 'rel="next"' not in second
    assert all(body(c)["mode"] == "vector" and body(c)["tags"] == ["birds"] for c in calls_to(engine, "POST", "/search"))


def test_a_bad_filter_is_shown_beside_the_form(bridge: Bridge, engine: responses.RequestsMock) -> None:
    client = console(bridge, engine)
    page = client.get("/ui/search?q=plover&since=yesterday-ish")
    assert page.status_code == 400
    html = page.get_data(as_text=True)
    assert 'role="alert">since: must be an ISO 8601 date' in html and 'value="yesterday-ish"' in html
    assert calls_to(engine, "POST", "/search") == []


def test_overlapping_or_unordered_highlights_never_repeat_text() -> None:
    hit = {"text": "abcdef", "snippet": {"text": "abcdef", "start": 0, "highlights": [[1, 3], [2, 4], [4, 5]]}}
    assert passage(hit) == {"before": False, "after": False,
                            "parts": [("a", False), ("bc", True), ("d", False), ("e", True), ("f", False)]}


def test_punctuation_beyond_the_passage_is_shown_and_only_left_out_words_make_an_ellipsis() -> None:
    text = "Gulls chase terns. Then they rest."
    ends_early = {"text": text, "snippet": {"text": "Gulls chase terns", "start": 0, "highlights": [[12, 17]]}}
    assert passage(ends_early) == {"before": False, "after": True,
                                   "parts": [("Gulls chase ", False), ("terns", True)]}
    last = {"text": text, "snippet": {"text": "Then they rest", "start": 19, "highlights": [[10, 14]]}}
    assert passage(last) == {"before": True, "after": False,
                             "parts": [("Then they ", False), ("rest", True), (".", False)]}
    quoted = {"text": "“terns”", "snippet": {"text": "terns", "start": 1, "highlights": [[0, 5]]}}
    assert passage(quoted) == {"before": False, "after": False, "parts": [("“", False), ("terns", True), ("”", False)]}


def test_a_page_number_that_is_not_a_plain_positive_number_is_the_first_page() -> None:
    for given, page in [("", 1), ("0", 1), ("x", 1), ("²", 1), ("-2", 1), ("3", 3), ("99999999", 1), ("999", 5)]:
        assert Filters.from_args({"q": "x", "page": given}).page == page, given
