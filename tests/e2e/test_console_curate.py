"""Writing and curating in the console, and its jobs page, in a real browser (Playwright driving the
distribution's chromium) against a real gunicorn bridge and the real local engine (issue 39 items 2 and 3):
a new note, a note's title, tags and collection (a move, and a conflict), the tags page, the jobs page's
filter, paging, links and live status (with and without JavaScript), keyboard-only use, axe-core, phone
width, and what a read-only and a collection-limited token see and may send. Screenshots go to docs/ with
KB_CONSOLE_SCREENSHOTS_TO_DOCS=1, for the README."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from kb_bridge.testing.browser import axe_violations, sign_in, tab_to
from kb_bridge.testing.console import ConsoleClient
from kb_bridge.testing.mcp_http import modern_call
from kb_bridge.testing.processes import ENGINE_KEY, REPO, Service, start_bridge, wait_until

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

ADMIN = "curate-admin-key-0123456789abcdef"
READER = "curate-reader-token-0123456789abcdef"
LIMITED = "curate-limited-token-0123456789abcdef"
SUFFIX = str(os.getpid())
HOME = f"curate-{SUFFIX}"  # the limited token's one collection
AWAY = f"away-{SUFFIX}"  # a collection it may not see
ENGINE_AUTH = {"Authorization": f"Bearer {ENGINE_KEY}"}


@dataclass
class Console:
    bridge: Service
    engine: Service
    away_document: int = 0  # a note in AWAY, which the limited token may not see

    @property
    def ui(self) -> str:
        return self.bridge.url + "/ui"

    def add_note(self, text: str, title: str, collection: str = HOME, tags: tuple[str, ...] = ()) -> int:
        reply: Any = modern_call(self.bridge.url, ADMIN, "kb_addnote", {
            "text": text, "title": title, "collection": collection, "tags": list(tags), "wait": True})
        assert not reply["result"].get("isError"), reply
        return int(reply["result"]["structuredContent"]["document_id"])

    def document(self, document_id: int) -> dict[str, Any]:
        response = requests.get(f"{self.engine.url}/api/v1/documents/{document_id}", headers=ENGINE_AUTH, timeout=10)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def queue_note(self, text: str, tags: list[str]) -> int:
        """A note straight into the engine's queue (no wait): its job id."""
        response = requests.post(f"{self.engine.url}/api/v1/jobs", json={"text": text, "tags": tags},
                                 headers=ENGINE_AUTH, timeout=30)
        assert response.status_code == 202, response.text
        return int(response.json()["id"])

    def job(self, job_id: int) -> dict[str, Any]:
        response = requests.get(f"{self.engine.url}/api/v1/jobs/{job_id}", headers=ENGINE_AUTH, timeout=10)
        return dict(response.json())


@pytest.fixture(scope="module")
def console(engine: Service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    tmp = tmp_path_factory.mktemp("curate")
    tokens = tmp / "tokens.toml"
    tokens.write_text(
        f'[[token]]\nname = "reader"\nsha256 = "{hashlib.sha256(READER.encode()).hexdigest()}"\nscopes = ["kb:read"]\n\n'
        f'[[token]]\nname = "limited"\nsha256 = "{hashlib.sha256(LIMITED.encode()).hexdigest()}"\n'
        f'scopes = ["kb:read", "kb:write"]\ncollections = ["{HOME}"]\n')
    tokens.chmod(0o600)
    bridge = start_bridge(tmp, {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_API_KEY": ADMIN,
                                "KB_MCP_TOKENS_FILE": str(tokens)}, workers=2)
    found = Console(bridge, engine)
    # Both collections exist from the start, so the forms can offer them.
    found.add_note(f"Herons stand still in the shallows {SUFFIX}.", f"Heron {SUFFIX}", HOME, ("wader",))
    found.away_document = found.add_note(f"Egrets grow plumes in spring {SUFFIX}.", f"Egret {SUFFIX}", AWAY, ("secret-away",))
    yield found
    bridge.stop()


def shot(page: Any, name: str) -> None:
    if os.environ.get("KB_CONSOLE_SCREENSHOTS_TO_DOCS") == "1":
        page.screenshot(path=str(REPO / "docs" / f"console-{name}.png"))


def signed_in(browser: Any, console: Console, token: str = ADMIN, **context: Any) -> Any:
    return sign_in(browser, console.ui, token, **context)


def test_a_new_note_from_the_form_is_stored_with_its_collection_and_tags(browser: Any, console: Console) -> None:
    page = signed_in(browser, console)
    page.get_by_role("link", name="New note").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("New note")
    assert page.get_by_label("Collection").input_value() == "documents"  # the default, preselected
    page.get_by_label("Title").fill(f"Bittern {SUFFIX}")
    page.get_by_label("Collection").select_option(HOME)
    page.get_by_label("Tags").fill(f"reedbed-{SUFFIX}, booming")
    text = f"Bitterns boom from the reedbeds at dawn {SUFFIX}."
    page.get_by_label("Text").fill(text)
    shot(page, "new-note")
    page.get_by_role("button", name="Add note").click()
    # The job page follows the note until it is searchable, then links to it.
    link = page.get_by_role("status").get_by_role("link")
    expect(link).to_be_visible(timeout=60_000)
    link.click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Bittern {SUFFIX}")
    document_id = int(page.url.rsplit("/", 1)[1])
    stored = console.document(document_id)
    assert stored["content"] == text
    assert set(stored["tags"]) == {f"collection:{HOME}", f"reedbed-{SUFFIX}", "booming"}

    # The same text again in the same collection: not added, the form says where it already is.
    page.get_by_role("link", name="New note").click()
    page.get_by_label("Collection").select_option(HOME)
    page.get_by_label("Text").fill(text)
    page.get_by_role("button", name="Add note").click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("already has this text")
    assert alert.get_by_role("link").get_attribute("href").endswith(f"/ui/documents/{document_id}")
    expect(page.get_by_label("Text")).to_have_value(text)  # the typed text is kept


def test_edit_title_and_tags_and_move_then_a_conflict_changes_nothing(browser: Any, console: Console) -> None:
    document_id = console.add_note(f"Rails skulk in dense reeds {SUFFIX}.", f"Rail {SUFFIX}", HOME, ("skulker",))
    page = signed_in(browser, console)
    page.goto(f"{console.ui}/documents/{document_id}")
    assert page.get_by_label("Tags").input_value() == "skulker"
    page.get_by_label("Title").fill(f"Water rail {SUFFIX}")
    page.get_by_label("Tags").fill("skulker, marsh")
    page.get_by_label("Collection").select_option(AWAY)
    page.get_by_role("button", name="Change details").click()
    expect(page.get_by_role("status")).to_contain_text("Saved")
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Water rail {SUFFIX}")
    stored = console.document(document_id)
    assert stored["title"] == f"Water rail {SUFFIX}"
    assert sorted(stored["tags"]) == sorted([f"collection:{AWAY}", "skulker", "marsh"])
    shot(page, "details")

    # An agent changes the note after the page loaded: the page's change is refused, nothing overwritten.
    page.reload()
    reply: Any = modern_call(console.bridge.url, ADMIN, "kb_update_note", {"document_id": document_id, "title": f"Agent's rail {SUFFIX}"})
    assert not reply["result"].get("isError"), reply
    page.get_by_label("Tags").fill("overwritten")
    page.get_by_label("Collection").select_option(HOME)
    page.get_by_role("button", name="Change details").click()
    expect(page.get_by_role("alert")).to_contain_text("changed since you loaded it")
    expect(page.get_by_label("Tags")).to_have_value("overwritten")  # the typed values are kept
    stored = console.document(document_id)
    assert stored["title"] == f"Agent's rail {SUFFIX}"
    assert sorted(stored["tags"]) == sorted([f"collection:{AWAY}", "skulker", "marsh"])
    # The history is linked from the document page (restore: tests/e2e/test_console.py).
    expect(page.locator(".history")).to_contain_text("Version")


def test_the_tags_page_counts_per_collection_and_links_to_the_documents(browser: Any, console: Console) -> None:
    tag = f"crake-{SUFFIX}"
    first = console.add_note(f"Spotted crakes whiplash-call at night {SUFFIX}.", f"Spotted crake {SUFFIX}", HOME, (tag,))
    second = console.add_note(f"Corncrakes rasp in hay meadows {SUFFIX}.", f"Corncrake {SUFFIX}", HOME, (tag,))
    console.add_note(f"Baillon's crakes are rarely seen {SUFFIX}.", f"Baillon's crake {SUFFIX}", AWAY, (tag,))
    page = signed_in(browser, console)
    page.get_by_role("link", name="Tags").click()
    home = page.locator("section", has=page.get_by_role("heading", name=HOME))
    expect(home.locator("li", has_text=tag)).to_contain_text("2")
    away = page.locator("section", has=page.get_by_role("heading", name=AWAY))
    expect(away.locator("li", has_text=tag)).to_contain_text("1")
    assert "collection:" not in page.locator("main").inner_text()  # the collection tags are the headings
    shot(page, "tags")
    home.get_by_role("link", name=tag).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Collection {HOME}, tag {tag}")
    hrefs = {a.get_attribute("href") for a in page.locator("ul.plain a").all()}
    assert hrefs == {f"/ui/documents/{first}", f"/ui/documents/{second}"}


def test_jobs_page_in_words_with_times_filter_and_a_link_to_the_document(
    browser: Any, console: Console, tmp_path: Path,
) -> None:
    http = ConsoleClient(console.ui, ADMIN)
    broken = http.upload(f"broken-{SUFFIX}.pdf", b"%PDF-1.4 this is no PDF at all", HOME)
    assert broken.status_code == 200, broken.text
    failed_id = broken.json()["job"]["id"]
    wait_until(lambda: console.job(failed_id)["status"] == "failed", 60, 0.2, what="the broken PDF's job to fail")
    page = signed_in(browser, console)
    page.get_by_role("link", name="Jobs").click()
    row = page.locator("tr", has=page.get_by_role("link", name=str(failed_id), exact=True))
    expect(row).to_contain_text(f"File upload: broken-{SUFFIX}.pdf")
    expect(row.locator('[data-field="status"]')).to_have_text("failed")
    assert row.locator('[data-field="error"]').inner_text().strip()  # the engine's reason
    assert row.locator("td").nth(3).inner_text().startswith("20")  # created, to the second
    assert row.locator('[data-field="duration"]').inner_text().endswith("s")
    assert "a update" not in page.locator("main").inner_text() and "a note" not in page.locator("main").inner_text()
    shot(page, "job-queue")

    page.get_by_label("Status").select_option("failed")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url("**/ui/jobs?status=failed")
    statuses = page.locator('[data-field="status"]').all_inner_texts()
    assert statuses and set(statuses) == {"failed"}
    expect(page.get_by_label("Status")).to_have_value("failed")

    page.get_by_label("Status").select_option("done")
    page.get_by_role("button", name="Show").click()
    done = page.locator("tbody tr").filter(has_text="New note").first
    expect(done.locator('[data-field="status"]')).to_have_text("done")
    done.get_by_role("link", name="Document").click()
    page.wait_for_url("**/ui/documents/*")
    expect(page.locator(".facts")).to_be_visible()


def test_jobs_page_pages_through_older_jobs(browser: Any, console: Console) -> None:
    for n in range(26):  # more than one page, whatever the other tests left
        console.queue_note(f"Paging note {n} about sandpipers {SUFFIX}.", [f"collection:{HOME}"])
    page = signed_in(browser, console)
    page.goto(console.ui + "/jobs")
    first = [int(x) for x in page.locator("tbody tr td:first-child").all_inner_texts()]
    assert len(first) == 25 and first == sorted(first, reverse=True)
    expect(page.get_by_role("status")).to_contain_text("page 1 of")
    page.get_by_role("link", name="Older jobs").click()
    page.wait_for_url("**/ui/jobs?page=2")
    second = [int(x) for x in page.locator("tbody tr td:first-child").all_inner_texts()]
    assert second and max(second) < min(first)
    page.get_by_role("link", name="Newer jobs").click()
    page.wait_for_url("**/ui/jobs?page=1")
    assert [int(x) for x in page.locator("tbody tr td:first-child").all_inner_texts()][-1] == first[-1]


def long_note(words: int) -> str:
    """A note long enough that embedding it takes a while (many chunks), so its job is seen running."""
    return " ".join(f"godwit{i % 97} flies over estuary {i} with the tide." for i in range(words))


@pytest.mark.parametrize("javascript", [True, False], ids=["script", "meta-refresh"])
def test_a_running_job_updates_on_the_jobs_page(browser: Any, console: Console, javascript: bool) -> None:
    page = signed_in(browser, console, java_script_enabled=javascript)
    job_id = console.queue_note(long_note(1_500) + f" {SUFFIX} {javascript}", [f"collection:{HOME}"])
    page.goto(console.ui + "/jobs")
    row = page.locator(f'tr[data-job="{job_id}"]')
    status = row.locator('[data-field="status"]')
    assert status.inner_text() in ("queued", "running"), "the job finished before the page showed it"
    page.evaluate("window.keptAcrossUpdates = true")
    expect(status).to_have_text("done", timeout=120_000)
    expect(row.locator('[data-field="document"] a')).to_be_visible()
    if javascript:  # updated in place by console.js, not by reloading the page
        assert page.evaluate("window.keptAcrossUpdates === true")
    else:  # the page refreshed itself (the meta refresh in <noscript>)
        assert page.evaluate("window.keptAcrossUpdates === undefined")


def test_keyboard_only_new_note_and_job_filter(browser: Any, console: Console) -> None:
    page = signed_in(browser, console)

    tab_to(page, 'a[href="/ui/notes/new"]', 40)
    page.keyboard.press("Enter")
    page.wait_for_url("**/ui/notes/new")
    tab_to(page, "#note-title", 40)
    page.keyboard.type(f"Ruff {SUFFIX}")
    tab_to(page, "#note-text", 40)
    page.keyboard.type(f"Ruffs lek on spring meadows {SUFFIX}.")
    tab_to(page, "button[type=submit]:not(.signout button)", 40)
    page.keyboard.press("Enter")
    page.wait_for_url("**/ui/jobs/*")
    tab_to(page, 'a[href="/ui/jobs"]', 40)
    page.keyboard.press("Enter")
    page.wait_for_url("**/ui/jobs")
    tab_to(page, "#job-status", 40)
    page.keyboard.type("failed")  # a select picks the option typed
    tab_to(page, "main button[type=submit]", 40)
    page.keyboard.press("Enter")
    page.wait_for_url("**/ui/jobs?status=failed")


def test_keyboard_only_details_change(browser: Any, console: Console) -> None:
    document_id = console.add_note(f"Dunlins turn as one flock {SUFFIX}.", f"Dunlin {SUFFIX}", HOME, ("waders",))
    page = signed_in(browser, console)
    page.goto(f"{console.ui}/documents/{document_id}")

    tab_to(page, "#details-title", 60)
    page.keyboard.press("Control+A")
    page.keyboard.type(f"Dunlin flock {SUFFIX}")
    tab_to(page, "#details-tags", 60)
    page.keyboard.press("End")
    page.keyboard.type(", murmuration")
    tab_to(page, "#details-collection", 60)
    page.keyboard.type(AWAY)  # a select picks the option typed
    tab_to(page, "form:has(#details-title) button[type=submit]", 60)
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_contain_text("Saved")
    stored = console.document(document_id)
    assert stored["title"] == f"Dunlin flock {SUFFIX}"
    assert sorted(stored["tags"]) == sorted([f"collection:{AWAY}", "waders", "murmuration"])


def curating_pages(console: Console) -> list[str]:
    document_id = console.add_note(f"Lapwings tumble in display {SUFFIX}.", f"Lapwing {SUFFIX}", HOME, ("display",))
    job = requests.get(f"{console.engine.url}/api/v1/jobs", params={"limit": 1}, headers=ENGINE_AUTH, timeout=10).json()["jobs"][0]
    return ["/notes/new", f"/documents/{document_id}", "/tags", f"/collections/{HOME}?tag=display", "/jobs",
            "/jobs?status=done&page=1", f"/jobs/{job['id']}"]


def test_no_serious_or_critical_axe_violations(browser: Any, console: Console) -> None:
    page = signed_in(browser, console, bypass_csp=True)  # to inject axe-core; the console's own CSP stays as served
    assert axe_violations(page, console.ui, curating_pages(console)) == {}


def test_readable_at_phone_width_without_horizontal_scrolling(browser: Any, console: Console) -> None:
    page = signed_in(browser, console, viewport={"width": 390, "height": 844}, is_mobile=True)
    for path in curating_pages(console):
        page.goto(console.ui + path)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"{path} is {width}px wide"


def test_a_read_only_token_sees_no_write_controls_and_its_posts_are_refused(browser: Any, console: Console) -> None:
    document_id = console.add_note(f"Stilts wade on long pink legs {SUFFIX}.", f"Stilt {SUFFIX}", HOME, ("legs",))
    page = signed_in(browser, console, token=READER)
    page.goto(f"{console.ui}/documents/{document_id}")
    expect(page.get_by_role("heading", level=1)).to_have_text(f"Stilt {SUFFIX}")
    assert page.get_by_role("button", name="Change details").count() == 0
    assert page.get_by_label("Title").count() == 0
    assert page.get_by_role("link", name="New note").count() == 0
    page.get_by_role("link", name="Tags").click()  # reading is allowed
    expect(page.get_by_role("heading", name=HOME)).to_be_visible()
    assert page.goto(console.ui + "/notes/new").status == 403
    csrf = page.locator('input[name="csrf_token"]').first.get_attribute("value")
    api = page.context.request
    for path, form in ((f"/documents/{document_id}/details", {"title": "hijacked", "version": "1"}),
                       ("/notes/new", {"text": f"never stored {SUFFIX}", "collection": HOME})):
        refused = api.post(console.ui + path, form={"csrf_token": csrf, **form}, max_redirects=0)
        assert refused.status == 403, path
    assert console.document(document_id)["title"] == f"Stilt {SUFFIX}"


def test_a_collection_limited_token_sees_and_targets_only_its_collection(browser: Any, console: Console) -> None:
    document_id = console.add_note(f"Dotterels are tame on the fells {SUFFIX}.", f"Dotterel {SUFFIX}", HOME)
    page = signed_in(browser, console, token=LIMITED)
    # Each click is followed by a wait for the page it leads to: the reads after it do not wait, and on a
    # loaded machine they ran on the page before (no headings: an empty list).
    page.get_by_role("link", name="New note").click()
    page.wait_for_url(f"{console.ui}/notes/new")
    assert page.get_by_label("Collection").locator("option").all_inner_texts() == [HOME]
    page.goto(f"{console.ui}/documents/{document_id}")
    assert page.get_by_label("Collection").locator("option").all_inner_texts() == [HOME]
    page.get_by_role("link", name="Tags").click()
    page.wait_for_url(f"{console.ui}/tags")
    headings = page.get_by_role("heading", level=2).all_inner_texts()
    assert [h.split()[0] for h in headings] == [HOME]
    assert "secret-away" not in page.content()
    page.get_by_role("link", name="Jobs").click()
    page.wait_for_url(f"{console.ui}/jobs")
    shown: set[int] = set()
    while True:  # every page of jobs: only jobs whose documents are in HOME
        hrefs = page.locator('[data-field="document"] a').evaluate_all("links => links.map(a => a.href)")
        shown |= {int(h.rsplit("/", 1)[1]) for h in hrefs}
        older = page.get_by_role("link", name="Older jobs")
        if older.count() == 0:
            break
        target = older.evaluate("a => a.href")  # absolute
        older.click()
        page.wait_for_url(target)
    assert document_id in shown and console.away_document not in shown
    assert all(f"collection:{HOME}" in console.document(d)["tags"] for d in shown)

    # A forged move into a collection it may not see is refused with the tool's reason; nothing moves.
    csrf = page.locator('input[name="csrf_token"]').first.get_attribute("value")
    version = console.document(document_id)["version"]
    refused = page.context.request.post(f"{console.ui}/documents/{document_id}/details", max_redirects=0, form={
        "csrf_token": csrf, "version": str(version), "title": f"Dotterel {SUFFIX}", "tags": "", "collection": AWAY})
    assert refused.status == 403
    assert "may only write to its own collections" in refused.text()
    assert console.document(document_id)["tags"] == [f"collection:{HOME}"]
    note = page.context.request.post(f"{console.ui}/notes/new", max_redirects=0, form={
        "csrf_token": csrf, "text": f"Smuggled into away {SUFFIX}", "collection": AWAY})
    assert note.status == 403 and "may only write to its own collections" in note.text()
