"""The console's search page in a real browser (Playwright driving the distribution's chromium) against a real
gunicorn bridge and the real local engine (engine 3.11 snippets): every filter (collection, mode, tags, time
on creation or last update), scores, hits grouped by document, the matched words marked in escaped text, a
count that says what it counts, pages that keep the filters, keyboard-only use, axe-core, a 390 px screen,
and a token limited to one collection that sees and filters only that one."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from kb_bridge.testing.browser import axe_violations, sign_in, tab_to
from kb_bridge.testing.mcp_http import modern_call
from kb_bridge.testing.processes import ENGINE_KEY, Service, start_bridge, wait_until

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

ADMIN = "search-admin-key-0123456789abcdef"
LIMITED = "search-limited-token-0123456789abcdef"
SUFFIX = str(os.getpid())
MARK = f"sandwichtern{SUFFIX}"  # one word that only this module's notes hold
PAGED = f"oystercatcher{SUFFIX}"
OURS, THEIRS, MANY = f"terns-{SUFFIX}", f"gulls-{SUFFIX}", f"waders-{SUFFIX}"
FILLER = "Shore birds feed along the tideline while the water falls and rises again. " * 14


@dataclass
class Site:
    bridge: Service
    engine: Service
    long_id: int

    @property
    def ui(self) -> str:
        return self.bridge.url + "/ui"


def add_note(bridge: Service, text: str, title: str, collection: str, tags: list[str] | None = None) -> int:
    reply = modern_call(bridge.url, ADMIN, "kb_addnote", {"text": text, "title": title, "collection": collection,
                                                          "tags": tags or [], "wait": True})
    result: Any = reply["result"]
    assert not result.get("isError"), reply
    return int(result["structuredContent"]["document_id"])


def add_old_note(engine: Service, text: str, title: str, collection: str) -> None:
    """A note created and last updated on 2020-03-01 (the engine's import fields, 3.8)."""
    headers = {"Authorization": f"Bearer {ENGINE_KEY}"}
    job = requests.post(f"{engine.url}/api/v1/jobs", headers=headers, timeout=10, json={
        "text": text, "title": title, "tags": [f"collection:{collection}"], "created_at": "2020-03-01T12:00:00Z"})
    assert job.status_code == 202, job.text

    def done() -> bool:
        status = requests.get(f"{engine.url}/api/v1/jobs/{job.json()['id']}", headers=headers, timeout=10).json()
        assert status["status"] != "failed", status
        return bool(status["status"] == "done")
    wait_until(done, 120, what="the old note indexed")


@pytest.fixture(scope="module")
def site(engine: Service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("console-search")
    tokens = tmp / "tokens.toml"
    tokens.write_text(f'[[token]]\nname = "terns-only"\nsha256 = "{hashlib.sha256(LIMITED.encode()).hexdigest()}"\n'
                      f'scopes = ["kb:read"]\ncollections = ["{OURS}"]\n')
    tokens.chmod(0o600)
    bridge = start_bridge(tmp, {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_API_KEY": ADMIN,
                                "KB_MCP_TOKENS_FILE": str(tokens)}, workers=1)
    # A long note (several chunks that all hold the word), a tagged one, an old one; one in another collection.
    long_id = add_note(bridge, f"{MARK} colonies nest on shingle. {FILLER}The {MARK} returns each April. {FILLER}"
                               f"A {MARK} dives for sand eels.", f"Long tern {SUFFIX}", OURS)
    add_note(bridge, f"A <script>alert(1)</script> {MARK} & friends rest on the spit.", f"Tagged tern {SUFFIX}",
             OURS, ["coastal"])
    add_old_note(engine, f"An old record of a {MARK} from the archive.", f"Old tern {SUFFIX}", OURS)
    add_note(bridge, f"Gulls chase the {MARK} for its catch.", f"Gull {SUFFIX}", THEIRS)
    for n in range(12):
        add_note(bridge, f"Wader note {n}: the {PAGED} probes the mud.", f"Wader {n:02d} {SUFFIX}", MANY)
    yield Site(bridge, engine, long_id)
    bridge.stop()


def signed_in(browser: Any, site: Site, token: str = ADMIN, **context: Any) -> Any:
    return sign_in(browser, site.ui, token, **context)


def titles(page: Any) -> list[str]:
    return [str(t) for t in page.locator(".results > li > a").all_inner_texts()]


def search_with(page: Any, query: str, **filters: str) -> None:
    """Fill the form as a person would and submit it."""
    page.get_by_role("searchbox", name="Search").fill(query)
    if filters and page.locator("details.filters-box[open]").count() == 0:
        page.locator(".filters-box summary").click()  # the filters fold away until one is in use
    for name, value in filters.items():
        field = page.locator(f"#{name}")
        if field.evaluate("e => e.tagName") == "SELECT":
            field.select_option(value)
        else:
            field.fill(value)
    page.get_by_role("button", name="Search").click()
    page.wait_for_url("**/ui/search?q=*")


def test_search_scores_groups_and_marks_the_matched_words(browser: Any, site: Site) -> None:
    page = signed_in(browser, site)
    search_with(page, MARK, mode="fts")
    expect(page.get_by_role("status")).to_contain_text("4 documents in the top ")
    assert sorted(titles(page)) == sorted([*(f"{t} tern {SUFFIX}" for t in ("Long", "Tagged", "Old")), f"Gull {SUFFIX}"])
    # The long note is one entry with each of its chunks' hits under it, every hit with its score.
    long_entry = page.locator(".results > li").filter(has=page.get_by_role("link", name=f"Long tern {SUFFIX}"))
    assert long_entry.locator(".hits > li").count() >= 2
    expect(long_entry.locator(".meta").first).to_contain_text(OURS)
    scores = page.locator(".score").all_inner_texts()
    assert scores and all(re.fullmatch(r"score \d+\.\d{3}", s) for s in scores), scores
    # The passage that matched, the word marked wherever it is in the chunk (not the chunk's start).
    marks = page.locator(".snippet mark").all_inner_texts()
    assert marks and {m.lower() for m in marks} == {MARK}
    expect(long_entry).to_contain_text(f"The {MARK} returns each April")
    # Escaped text: the note's markup shows as text and runs nothing.
    tagged = page.locator(".results > li").filter(has=page.get_by_role("link", name=f"Tagged tern {SUFFIX}"))
    expect(tagged.locator(".snippet")).to_contain_text("<script>alert(1)</script>")
    assert page.locator(".snippet script").count() == 0


def test_every_filter_narrows_the_search_and_stays_in_the_form(browser: Any, site: Site) -> None:
    page = signed_in(browser, site)
    search_with(page, MARK, collection=OURS, mode="fts")
    assert f"Gull {SUFFIX}" not in titles(page) and len(titles(page)) == 3
    expect(page.get_by_role("heading", name=f"Results in {OURS}")).to_be_visible()
    search_with(page, MARK, tags="coastal")
    assert titles(page) == [f"Tagged tern {SUFFIX}"]
    search_with(page, MARK, tags="", time_field="created", until="2021-01-01")
    assert titles(page) == [f"Old tern {SUFFIX}"]
    search_with(page, MARK, time_field="updated", since="2021-01-01", until="")
    assert sorted(titles(page)) == sorted([f"Long tern {SUFFIX}", f"Tagged tern {SUFFIX}"])
    search_with(page, MARK, since="7d", mode="vector")
    expect(page.get_by_role("status")).to_contain_text("search")
    query = parse_qs(urlsplit(page.url).query)
    assert query == {"q": [MARK], "collection": [OURS], "mode": ["vector"], "time_field": ["updated"],
                     "since": ["7d"]}
    # The form shows the search back as given.
    assert page.locator("#collection").input_value() == OURS and page.locator("#mode").input_value() == "vector"
    assert page.locator("#time_field").input_value() == "updated" and page.locator("#since").input_value() == "7d"
    # A filter the tool refuses is said beside the form, which keeps what was typed.
    search_with(page, MARK, since="last tuesday")
    expect(page.get_by_role("alert")).to_contain_text("since")
    assert page.locator("#since").input_value() == "last tuesday" and page.locator(".results").count() == 0


def test_pages_keep_the_filters(browser: Any, site: Site) -> None:
    page = signed_in(browser, site)
    search_with(page, PAGED, collection=MANY, mode="fts")
    expect(page.get_by_role("status")).to_contain_text("12 documents in the top 12 hits")
    expect(page.get_by_role("status")).to_contain_text("showing 1–10")
    first = titles(page)
    assert len(first) == 10 and page.get_by_role("link", name="Previous page").count() == 0
    page.get_by_role("link", name="Next page").click()
    page.wait_for_url("**page=2*")
    query = parse_qs(urlsplit(page.url).query)
    assert query == {"q": [PAGED], "collection": [MANY], "mode": ["fts"], "page": ["2"]}
    second = titles(page)
    assert len(second) == 2 and not set(first) & set(second)
    expect(page.get_by_role("status")).to_contain_text("showing 11–12")
    assert page.locator("#collection").input_value() == MANY
    page.get_by_role("link", name="Previous page").click()
    page.wait_for_url(lambda url: "page=" not in url)
    assert titles(page) == first


def test_keyboard_only_filters_search_and_pages(browser: Any, site: Site) -> None:
    page = signed_in(browser, site)

    tab_to(page, "#q", 40)
    page.keyboard.type(PAGED)
    tab_to(page, ".filters-box summary", 40)
    page.keyboard.press("Enter")  # opens the folded filters
    tab_to(page, "#collection", 40)
    options = page.locator("#collection option").all_inner_texts()
    for _ in range(options.index(MANY)):
        page.keyboard.press("ArrowDown")
    tab_to(page, "#mode", 40)
    page.keyboard.press("ArrowDown")  # hybrid → fts
    tab_to(page, "#q", 40)
    page.keyboard.press("Enter")
    page.wait_for_url("**/ui/search?q=*")
    assert parse_qs(urlsplit(page.url).query) == {"q": [PAGED], "collection": [MANY], "mode": ["fts"],
                                                  "time_field": ["created"]}  # the form sends every field
    tab_to(page, 'a[rel="next"]', 40)
    page.keyboard.press("Enter")
    page.wait_for_url("**page=2*")
    tab_to(page, ".results a", 40)
    page.keyboard.press("Enter")
    page.wait_for_url("**/ui/documents/*")
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"{SUFFIX}")


def test_no_serious_axe_violations_and_readable_at_390_px(browser: Any, site: Site) -> None:
    paths = [f"/search?q={MARK}&mode=fts", f"/search?q={PAGED}&collection={MANY}&mode=fts&page=2",
             f"/search?q={MARK}&since=last+tuesday", "/search"]
    page = signed_in(browser, site, bypass_csp=True)  # to inject axe-core; the console's own CSP stays as served
    assert axe_violations(page, site.ui, paths) == {}
    phone = signed_in(browser, site, viewport={"width": 390, "height": 844}, is_mobile=True)
    for path in paths:
        phone.goto(site.ui + path)
        width = phone.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"{path} is {width}px wide"
    phone.goto(site.ui + paths[0])
    phone.screenshot(path=str(site.bridge.log_path.parent / "search-phone.png"), full_page=True)


def test_a_collection_limited_token_sees_and_filters_only_its_collections(browser: Any, site: Site) -> None:
    page = signed_in(browser, site, token=LIMITED)
    assert page.locator("#collection option").all_text_contents() == ["All collections", OURS]
    search_with(page, MARK, mode="fts")
    assert sorted(titles(page)) == sorted(f"{t} tern {SUFFIX}" for t in ("Long", "Tagged", "Old"))
    page.goto(f"{site.ui}/search?q={MARK}&collection={THEIRS}&mode=fts")
    expect(page.get_by_role("alert")).to_contain_text(f"may not search the collection '{THEIRS}'")
    assert titles(page) == []
