"""The console's curating and jobs pages against a faked engine, for what a browser test cannot easily make
happen: an engine too old to count tags per collection, a job's words and times, the filter's checks
(the end-to-end tests in tests/e2e/test_console_curate.py drive the pages against the real engine)."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
import responses
from flask.testing import FlaskClient

from kb_bridge.runtime import Bridge
from kb_bridge.testing.fake_engine import API, document, job
from kb_bridge.tools.browse import TAGS_PAGE_COLLECTIONS
from kb_bridge.web.ops import create_web_app

from tests.test_console_app import csrf_of

JSON = {"Accept": "application/json"}


def signed_in(bridge: Bridge) -> FlaskClient:
    """A client signed in to a keyless bridge's console."""
    client = create_web_app(bridge).test_client()
    client.get("/ui/sign-in")
    pre = client.get_cookie("kb_console_signin", path="/ui")
    assert pre is not None
    assert client.post("/ui/sign-in", data={"csrf_token": pre.value, "token": ""}).status_code == 302
    return client


def test_the_tags_page_refuses_an_engine_that_cannot_count_within_a_collection(
    bridge: Bridge, engine: responses.RequestsMock,
) -> None:
    # An engine before 3.12 ignores `within` and counts every document: no counts that could mislead.
    engine.get(f"{API}/tags", json={"tags": [{"name": "collection:memory", "documents": 3}, {"name": "x", "documents": 9}]})
    answer = signed_in(bridge).get("/ui/tags", headers=JSON)
    assert answer.status_code == 502
    assert "ENGINE_UNSUPPORTED" in answer.get_json()["error"] and "3.12" in answer.get_json()["error"]


def test_the_tags_page_lists_each_collections_own_tags(bridge: Bridge, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/tags", match=[responses.matchers.query_param_matcher({"prefix": "collection:"})],
               json={"tags": [{"name": "collection:memory", "documents": 3}]})
    engine.get(f"{API}/tags", match=[responses.matchers.query_param_matcher({"within": "collection:memory"})],
               json={"within": "collection:memory", "tags": [{"name": "collection:memory", "documents": 3},
                                                             {"name": "prefs", "documents": 2}]})
    page = signed_in(bridge).get("/ui/tags").get_data(as_text=True)
    assert 'href="/ui/collections/memory?tag=prefs">prefs</a> <span class="meta">2</span>' in page
    assert "collection:memory" not in page


def test_the_tags_page_counts_a_page_of_collections_per_request(bridge: Bridge, engine: responses.RequestsMock) -> None:
    # Each collection is one engine request: a writer who made thousands of collections (one note each) made one
    # page load thousands of engine requests (5,000 collections: 8 s of the engine's time, up to the call deadline).
    names = [f"c{i:03d}" for i in range(120)]
    engine.get(f"{API}/tags", match=[responses.matchers.query_param_matcher({"prefix": "collection:"})],
               json={"tags": [{"name": f"collection:{n}", "documents": 1} for n in names]})
    for n in names:
        engine.get(f"{API}/tags", match=[responses.matchers.query_param_matcher({"within": f"collection:{n}"})],
                   json={"within": f"collection:{n}", "tags": [{"name": f"t-{n}", "documents": 1}]})
    client = signed_in(bridge)
    seen: list[str] = []
    path: str | None = "/ui/tags"
    while path is not None:
        before = len(engine.calls)
        page = client.get(path).get_data(as_text=True)
        assert len(engine.calls) - before <= 1 + TAGS_PAGE_COLLECTIONS
        seen += [n for n in names if f">t-{n}</a>" in page]
        follow = [h for h in re.findall(r'href="([^"]+)"', page) if h.startswith("/ui/tags?")]
        path = follow[0].replace("&amp;", "&") if follow else None
    assert seen == names  # every collection, each once, in order


def test_a_collection_named_as_the_bridge_would_not_name_one_does_not_break_the_tags_page(
    bridge: Bridge, engine: responses.RequestsMock,
) -> None:
    # A collection tag written to the engine directly, whose name the bridge's tools would refuse (over 64
    # characters): the page counts it with the others instead of answering 400 to everyone.
    odd = "x" * 80
    engine.get(f"{API}/tags", match=[responses.matchers.query_param_matcher({"prefix": "collection:"})],
               json={"tags": [{"name": f"collection:{odd}", "documents": 1}, {"name": "collection:memory", "documents": 1}]})
    for name in (odd, "memory"):
        engine.get(f"{API}/tags", match=[responses.matchers.query_param_matcher({"within": f"collection:{name}"})],
                   json={"within": f"collection:{name}", "tags": [{"name": f"t-{name[:3]}", "documents": 1}]})
    response = signed_in(bridge).get("/ui/tags")
    assert response.status_code == 200
    page = response.get_data(as_text=True)
    assert ">t-xxx</a>" in page and ">t-mem</a>" in page


def test_jobs_show_their_kind_in_words_their_times_and_how_long_they_took(
    bridge: Bridge, engine: responses.RequestsMock,
) -> None:
    engine.get(f"{API}/jobs", json={"total": 2, "jobs": [
        job(8, type="update", status="done", document_id=42, created_at="2026-04-04T21:50:19Z",
            started_at="2026-04-04T21:50:20Z", finished_at="2026-04-04T21:50:22.5Z"),
        job(7, type="file", status="failed", filename="a.pdf", error="not a PDF", created_at="2026-04-04T21:49:00Z",
            finished_at="2026-04-04T21:51:05Z"),
    ]})
    client = signed_in(bridge)
    rows = client.get("/ui/jobs", headers=JSON).get_json()["jobs"]
    assert [(r["kind"], r["created"], r["finished"], r["duration"]) for r in rows] == [
        ("Note update", "2026-04-04 21:50:19", "2026-04-04 21:50:22", "2.5 s"),
        ("File upload", "2026-04-04 21:49:00", "2026-04-04 21:51:05", "2 min 5 s"),
    ]
    assert rows[0]["document_url"] == "/ui/documents/42" and rows[1]["document_url"] is None
    page = client.get("/ui/jobs").get_data(as_text=True)
    assert "Note update" in page and "a update" not in page and "not a PDF" in page
    assert "refresh" not in page  # nothing runs: no refresh


def test_the_job_filter_and_page_reach_the_engine_and_bad_values_are_refused(
    bridge: Bridge, engine: responses.RequestsMock,
) -> None:
    engine.get(f"{API}/jobs", json={"total": 60, "jobs": [job(i, status="running") for i in range(35, 10, -1)]})
    client = signed_in(bridge)
    page = client.get("/ui/jobs?status=running&page=2").get_data(as_text=True)
    sent = parse_qs(urlsplit(engine.calls[-1].request.url).query)
    assert sent == {"status": ["running"], "limit": ["25"], "offset": ["25"]}
    assert "page 2 of 3" in page and 'rel="next"' in page and 'rel="prev"' in page
    assert '<noscript><meta http-equiv="refresh"' in page and 'data-live="/ui/jobs?status=running&amp;page=2"' in page
    calls = len(engine.calls)
    for query in ("status=stuck", "page=0", "page=x"):
        assert client.get(f"/ui/jobs?{query}", headers=JSON).status_code == 400, query
    assert len(engine.calls) == calls  # refused before the engine is asked


# "²".isdigit() is true yet int() refuses it, and int() refuses more than 4300 digits: each was a 500.
@pytest.mark.parametrize("number", ["²", "0" * 5000 + "1", "9" * 5000, "9" * 40, "0", "-1", ""])
def test_a_number_field_that_is_no_plain_number_is_refused_on_the_error_page(
    bridge: Bridge, engine: responses.RequestsMock, number: str,
) -> None:
    client = signed_in(bridge)
    csrf = csrf_of(client)
    calls = len(engine.calls)
    asked = [client.get("/ui/jobs", query_string={"page": number}),
             client.post("/ui/documents/42", data={"csrf_token": csrf, "text": "x", "version": number}),
             client.post("/ui/documents/42/details", data={"csrf_token": csrf, "title": "t", "version": number}),
             client.post("/ui/documents/42/versions/1", data={"csrf_token": csrf, "current": number})]
    for answer in asked:
        assert answer.status_code == 400, answer.request.path
        assert "<h1>Refused</h1>" in answer.get_data(as_text=True)
        assert answer.headers["Content-Security-Policy"].startswith("default-src 'self'")
    assert len(engine.calls) == calls  # refused before the engine is asked


def test_a_missing_version_of_a_note_is_named_as_the_version(bridge: Bridge, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents/1", match=[responses.matchers.query_param_matcher({"version": "99"})], status=404,
               json={"error": {"code": "not_found", "message": "no such version"}})
    engine.get(f"{API}/documents/1", json=document(1, title="Plover", version=3))
    engine.get(f"{API}/documents/1/versions", json={"id": 1, "versions": []})
    answer = signed_in(bridge).get("/ui/documents/1/versions/99", headers=JSON)
    assert answer.status_code == 404
    assert answer.get_json()["error"] == "NOT_FOUND: version 99 of document 1 not found"
