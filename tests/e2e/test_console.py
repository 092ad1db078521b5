"""The web console in a real browser (Playwright for Python driving the distribution's chromium) against a
real gunicorn bridge (two workers: sessions must hold across them) and the real local engine: sign-in,
wrong token, sign-out, search, edit, conflict, delete, upload to searchable, jobs, CSRF refusal, keyboard
only, axe-core and phone width. Screenshots go to the test's directory (and to docs/ with
KB_CONSOLE_SCREENSHOTS_TO_DOCS=1, for the README)."""

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
from kb_bridge.testing.processes import ENGINE_KEY
from kb_bridge.testing.console import ConsoleClient
from kb_bridge.testing.mcp_http import error_code, modern_call
from kb_bridge.testing.processes import REPO, Service, free_port, start_bridge, wait_until

playwright_api = pytest.importorskip("playwright.sync_api")

ADMIN = "console-admin-key-0123456789abcdef"
READER = "console-reader-token-0123456789abcdef"
SUFFIX = str(os.getpid())
COLLECTION = f"console-{SUFFIX}"
MARKER = f"lapwing{SUFFIX}"
DOCS = REPO / "docs"


@dataclass
class Console:
    bridge: Service
    engine: Service
    shots: Path

    @property
    def ui(self) -> str:
        return self.bridge.url + "/ui"

    def add_note(self, text: str, title: str) -> int:
        reply = modern_call(self.bridge.url, ADMIN, "kb_addnote",
                            {"text": text, "title": title, "collection": COLLECTION, "wait": True})
        result: Any = reply["result"]
        assert not result.get("isError"), reply
        return int(result["structuredContent"]["document_id"])

    def document(self, document_id: int) -> dict[str, Any] | None:
        response = requests.get(f"{self.engine.url}/api/v1/documents/{document_id}",
                                headers={"Authorization": f"Bearer {ENGINE_KEY}"}, timeout=10)
        return None if response.status_code == 404 else dict(response.json())


@pytest.fixture(scope="module")
def console(engine: Service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    tmp = tmp_path_factory.mktemp("console")
    tokens = tmp / "tokens.toml"
    tokens.write_text(f'[[token]]\nname = "reader"\nsha256 = "{hashlib.sha256(READER.encode()).hexdigest()}"\n'
                      'scopes = ["kb:read"]\n')
    tokens.chmod(0o600)  # the bridge refuses a tokens file others can write, whatever the umask
    bridge = start_bridge(tmp, {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_API_KEY": ADMIN,
                                "KB_MCP_TOKENS_FILE": str(tokens)}, workers=2)
    shots = tmp / "screenshots"
    shots.mkdir()
    yield Console(bridge, engine, shots)
    bridge.stop()


def shot(console: Console, page: Any, name: str) -> None:
    page.screenshot(path=str(console.shots / f"{name}.png"), full_page=True)
    if os.environ.get("KB_CONSOLE_SCREENSHOTS_TO_DOCS") == "1":
        page.screenshot(path=str(DOCS / f"console-{name}.png"))


def signed_in(browser: Any, console: Console, token: str = ADMIN, **context: Any) -> Any:
    return sign_in(browser, console.ui, token, start="/", **context)


def test_a_wrong_token_does_not_sign_in(browser: Any, console: Console) -> None:
    page = browser.new_context().new_page()
    page.goto(console.ui + "/search")
    assert page.url.endswith("/ui/sign-in")
    page.get_by_label("Access token").fill("not-the-token-0123456789abcdef")
    page.get_by_role("button", name="Sign in").click()
    playwright_api.expect(page.get_by_role("alert")).to_contain_text("not valid")
    assert not any(c["name"] == "kb_console" for c in page.context.cookies())
    page.goto(console.ui + "/search")
    assert page.url.endswith("/ui/sign-in")
    shot(console, page, "wrong-token")


def test_sign_in_search_open_and_sign_out(browser: Any, console: Console) -> None:
    document_id = console.add_note(f"The {MARKER} calls peewit over wet meadows.", f"Lapwing calls {SUFFIX}")
    page = signed_in(browser, console)
    cookie = next(c for c in page.context.cookies() if c["name"] == "kb_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    page.get_by_role("searchbox", name="Search").fill(f"{MARKER} meadows")
    page.get_by_role("button", name="Search").click()
    link = page.get_by_role("link", name=f"Lapwing calls {SUFFIX}")
    playwright_api.expect(link).to_be_visible()
    playwright_api.expect(page.locator(".results li").first).to_contain_text("peewit over wet meadows")
    shot(console, page, "search")
    link.click()
    playwright_api.expect(page.get_by_role("heading", level=1)).to_have_text(f"Lapwing calls {SUFFIX}")
    playwright_api.expect(page.locator(".facts")).to_contain_text(COLLECTION)
    assert page.url.endswith(f"/ui/documents/{document_id}")

    page.get_by_role("link", name="Collections").click()
    playwright_api.expect(page.get_by_role("link", name=COLLECTION)).to_be_visible()

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/ui/sign-in")
    # The old cookie opens nothing any more: the session ended on the server.
    replay = browser.new_context()
    replay.add_cookies([{**cookie}])
    again = replay.new_page()
    again.goto(console.ui + "/search")
    assert again.url.endswith("/ui/sign-in")


def test_edit_a_note_then_a_conflict_keeps_the_typed_text(browser: Any, console: Console) -> None:
    document_id = console.add_note(f"Curlews probe mud with long bills {SUFFIX}.", f"Curlew {SUFFIX}")
    page = signed_in(browser, console)
    page.goto(f"{console.ui}/documents/{document_id}")
    page.get_by_label("Text").fill(f"Curlews probe soft mud with long curved bills {SUFFIX}.")
    page.get_by_role("button", name="Save").click()
    playwright_api.expect(page.get_by_role("status")).to_contain_text("Saved")
    stored = console.document(document_id)
    assert stored is not None and stored["version"] == 2 and "curved bills" in stored["content"]

    # Someone else changes the note after the page loaded version 2.
    page.reload()
    reply: Any = modern_call(console.bridge.url, ADMIN, "kb_update_note",
                             {"document_id": document_id, "text": f"An agent rewrote the curlew note {SUFFIX}."})
    assert not reply["result"].get("isError"), reply
    typed = f"My careful edit of the curlew note {SUFFIX}."
    page.get_by_label("Text").fill(typed)
    page.get_by_role("button", name="Save").click()
    playwright_api.expect(page.get_by_role("alert")).to_contain_text("onflict")
    playwright_api.expect(page.get_by_label("Text")).to_have_value(typed)
    stored = console.document(document_id)
    assert stored is not None and stored["content"] == f"An agent rewrote the curlew note {SUFFIX}."
    shot(console, page, "conflict")


def test_a_notes_history_is_shown_and_a_version_restored(browser: Any, console: Console) -> None:
    document_id = console.add_note(f"Godwits fly nonstop across the Pacific {SUFFIX}.", f"Godwit {SUFFIX}")
    for text in (f"Godwits fly 11,000 km nonstop {SUFFIX}.", f"Bar-tailed godwits migrate far {SUFFIX}."):
        reply: Any = modern_call(console.bridge.url, ADMIN, "kb_update_note", {"document_id": document_id, "text": text})
        assert not reply["result"].get("isError"), reply
    page = signed_in(browser, console)
    page.goto(f"{console.ui}/documents/{document_id}")
    history = page.locator(".history li")
    playwright_api.expect(history).to_have_count(3)
    playwright_api.expect(history.first).to_contain_text("Version 3 (current)")
    shot(console, page, "history")
    page.get_by_role("link", name="Version 1").click()
    playwright_api.expect(page.get_by_role("heading", level=1)).to_contain_text("Version 1")
    playwright_api.expect(page.locator(".content")).to_have_text(f"Godwits fly nonstop across the Pacific {SUFFIX}.")
    page.get_by_role("button", name="Restore this version").click()
    playwright_api.expect(page.get_by_role("status")).to_contain_text("version 4")
    stored = console.document(document_id)
    assert stored is not None and stored["version"] == 4
    assert stored["content"] == f"Godwits fly nonstop across the Pacific {SUFFIX}."
    playwright_api.expect(page.locator(".history li")).to_have_count(4)


def test_delete_asks_first(browser: Any, console: Console) -> None:
    document_id = console.add_note(f"Snipe drum in display flights {SUFFIX}.", f"Snipe {SUFFIX}")
    page = signed_in(browser, console)
    page.goto(f"{console.ui}/documents/{document_id}")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.get_by_role("button", name="Delete").click()
    assert console.document(document_id) is not None  # dismissed: nothing deleted
    messages: list[str] = []

    def accept(dialog: Any) -> None:
        messages.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    page.get_by_role("button", name="Delete").click()
    playwright_api.expect(page.get_by_role("heading", level=1)).to_have_text("Deleted")
    assert "for good" in messages[0]
    assert console.document(document_id) is None


def test_upload_until_searchable_and_the_jobs_page(browser: Any, console: Console, tmp_path: Path) -> None:
    upload = tmp_path / f"dunlin-{SUFFIX}.md"
    upload.write_text(f"# Dunlin {SUFFIX}\n\nDunlins gather in swirling flocks on estuaries in winter.\n")
    second = tmp_path / f"knot-{SUFFIX}.txt"
    second.write_text(f"Knots {SUFFIX} feed on mudflats in tight packs.\n")
    console.add_note(f"Sanderlings {SUFFIX} run along the surf line.", "Sanderlings")  # the collection exists
    page = signed_in(browser, console)
    page.get_by_role("link", name="Upload").click()
    picker = page.get_by_label("Files")
    assert picker.get_attribute("accept") == ".txt,.md,.pdf,.html,.docx" and picker.get_attribute("multiple") is not None
    assert page.get_by_label("Collection").input_value() == "documents"  # preselected, whatever sorts first
    picker.set_input_files([str(upload), str(second)])
    page.get_by_label("Collection").select_option(COLLECTION)
    page.get_by_label("Tags").fill(f"shorebirds-{SUFFIX}, estuary")
    page.get_by_role("button", name="Upload").click()
    jobs = page.locator("#upload-jobs li")
    playwright_api.expect(jobs).to_have_count(2)
    for item in (jobs.nth(0), jobs.nth(1)):
        playwright_api.expect(item).to_contain_text("Indexed and searchable", timeout=120_000)
    shot(console, page, "upload")
    document_id = int(jobs.nth(1).get_by_role("link").get_attribute("href").rsplit("/", 1)[1])
    stored = console.document(document_id)
    assert stored is not None and {f"collection:{COLLECTION}", f"shorebirds-{SUFFIX}", "estuary"} <= set(stored["tags"])
    page.get_by_role("link", name="Search").click()
    page.get_by_role("searchbox", name="Search").fill("swirling flocks on estuaries")
    page.keyboard.press("Enter")
    playwright_api.expect(page.get_by_role("link", name=upload.name)).to_be_visible()

    page.get_by_role("link", name="Jobs").click()
    row = page.locator("table.jobs tr", has_text=upload.name).first
    playwright_api.expect(row).to_contain_text("done")
    shot(console, page, "jobs")


def test_an_unsupported_file_type_is_refused_with_the_engines_reason(browser: Any, console: Console, tmp_path: Path) -> None:
    program = tmp_path / "setup.exe"
    program.write_bytes(b"MZ\x90\x00 not a document")
    page = signed_in(browser, console)
    page.get_by_role("link", name="Upload").click()
    page.get_by_label("Files").set_input_files(str(program))
    page.get_by_role("button", name="Upload").click()
    playwright_api.expect(page.locator("#upload-status")).to_contain_text(
        "The upload was refused: VALIDATION_ERROR: filename: the engine accepts these file types: txt, md, pdf, html, docx")

    # Refused after a file already sent: that one is listed (and followed), with the refusal beside it.
    first = tmp_path / f"curlew-{SUFFIX}.md"
    first.write_text(f"# Curlew {SUFFIX}\n\nCurlews probe deep mud with their long bills.\n")
    page.get_by_label("Files").set_input_files([str(first), str(program)])
    page.get_by_role("button", name="Upload").click()
    playwright_api.expect(page.locator("#upload-status")).to_contain_text(
        "Sent. Then setup.exe was refused (VALIDATION_ERROR: filename: the engine accepts these file types")
    playwright_api.expect(page.locator("#upload-jobs li")).to_have_count(1)
    playwright_api.expect(page.locator("#upload-jobs li")).to_contain_text(first.name)


def test_without_the_csrf_token_nothing_changes(browser: Any, console: Console) -> None:
    document_id = console.add_note(f"Redshanks are the sentinels of the marsh {SUFFIX}.", f"Redshank {SUFFIX}")
    page = signed_in(browser, console)
    api = page.context.request
    for path, form in ((f"/documents/{document_id}", {"text": "hijacked", "version": "1"}),
                       (f"/documents/{document_id}/delete", {"confirmed": "yes"}),
                       ("/sign-out", {})):
        response = api.post(console.ui + path, form=form, max_redirects=0)
        assert response.status == 403, path
        wrong = api.post(console.ui + path, form={**form, "csrf_token": "forged"}, max_redirects=0)
        assert wrong.status == 403, path
    stored = console.document(document_id)
    assert stored is not None and stored["version"] == 1 and "sentinels" in stored["content"]
    page.goto(console.ui + "/search")
    assert page.url.endswith("/ui/search")  # still signed in: the refused sign-out changed nothing


def test_keyboard_only_sign_in_search_and_open(browser: Any, console: Console) -> None:
    console.add_note(f"Avocets sweep their upturned bills {SUFFIX}.", f"Avocet {SUFFIX}")
    page = browser.new_context().new_page()
    page.goto(console.ui + "/sign-in")

    tab_to(page, "#token", 30)
    page.keyboard.type(ADMIN)
    page.keyboard.press("Enter")
    page.wait_for_url("**/ui/search")
    tab_to(page, "#q", 30)
    page.keyboard.type(f"avocets upturned {SUFFIX}")
    page.keyboard.press("Enter")
    page.wait_for_url("**/ui/search?q=*")
    tab_to(page, ".results a", 30)
    assert page.evaluate("document.activeElement.textContent") == f"Avocet {SUFFIX}"
    page.keyboard.press("Enter")
    page.wait_for_url("**/ui/documents/*")
    playwright_api.expect(page.get_by_role("heading", level=1)).to_have_text(f"Avocet {SUFFIX}")


def pages_to_check(console: Console, document_id: int) -> list[str]:
    return ["/sign-in", f"/search?q={MARKER}", "/collections", f"/collections/{COLLECTION}",
            f"/documents/{document_id}", "/upload", "/jobs", f"/documents/{document_id}/delete"]


def test_no_serious_or_critical_axe_violations(browser: Any, console: Console) -> None:
    document_id = console.add_note(f"Godwits fly non-stop across the Pacific {SUFFIX}.", f"Godwit {SUFFIX}")
    page = signed_in(browser, console, bypass_csp=True)  # to inject axe-core; the console's own CSP stays as served
    assert axe_violations(page, console.ui, pages_to_check(console, document_id)) == {}


def test_readable_at_phone_width_without_horizontal_scrolling(browser: Any, console: Console) -> None:
    document_id = console.add_note(
        f"Turnstones flip pebbles and seaweed to find food {SUFFIX}. " + "averyveryverylongwordwithoutanybreaks" * 4,
        f"Turnstone {SUFFIX}")
    page = signed_in(browser, console, viewport={"width": 390, "height": 844}, is_mobile=True)
    for path in pages_to_check(console, document_id):
        page.goto(console.ui + path)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"{path} is {width}px wide"
    page.goto(f"{console.ui}/search?q=turnstones pebbles {SUFFIX}")
    shot(console, page, "phone")


def test_a_read_only_token_sees_no_write_controls(browser: Any, console: Console) -> None:
    document_id = console.add_note(f"Plovers run and stop on the sand {SUFFIX}.", f"Plover {SUFFIX}")
    page = signed_in(browser, console, token=READER)
    page.goto(f"{console.ui}/documents/{document_id}")
    playwright_api.expect(page.get_by_role("heading", level=1)).to_have_text(f"Plover {SUFFIX}")
    assert page.get_by_role("button", name="Save").count() == 0
    assert page.get_by_role("button", name="Delete").count() == 0
    assert page.get_by_role("link", name="Upload").count() == 0
    csrf = page.locator('input[name="csrf_token"]').first.get_attribute("value")
    refused = page.context.request.post(f"{console.ui}/documents/{document_id}/delete",
                                        form={"csrf_token": csrf, "confirmed": "yes"}, max_redirects=0)
    assert refused.status == 403
    wait_until(lambda: console.document(document_id) is not None, 5, what="the document still there")


# --- the console over plain HTTP: what a script or an attacker can send (issue 32) ------------------------


def job_total(engine: Service) -> int:
    response = requests.get(engine.url + "/api/v1/jobs", params={"limit": 1},
                            headers={"Authorization": f"Bearer {ENGINE_KEY}"}, timeout=10)
    return int(response.json()["total"])


def tokens_toml(**tokens: tuple[str, str]) -> str:
    """A tokens file: name = (token, TOML list of scopes)."""
    return "".join(f'[[token]]\nname = "{name}"\nsha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
                   f"scopes = {scopes}\n\n" for name, (token, scopes) in tokens.items())


# A bridge configured so that agents cannot change anything (item 2): the console may not either.
NO_CONSOLE_WRITES = {
    "read-only": {"KB_MCP_READ_ONLY": "1"},
    "tools allow-list": {"KB_MCP_TOOLS": "kb_search,kb_get,kb_list,kb_collections,kb_jobs,kb_addnote"},
}


@pytest.mark.parametrize("config", sorted(NO_CONSOLE_WRITES))
def test_the_console_offers_only_the_tools_the_bridge_offers(console: Console, tmp_path: Path, config: str) -> None:
    document_id = console.add_note(f"Stints scurry along the tideline {SUFFIX}.", f"Stint {SUFFIX}")
    bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": console.engine.url, "KB_API_KEY": ENGINE_KEY,
                                     "KB_MCP_API_KEY": ADMIN, **NO_CONSOLE_WRITES[config]}, workers=1)
    try:
        # The API key holds every scope: only the bridge's tool set stands in the way.
        http = ConsoleClient(bridge.url + "/ui", ADMIN)
        page = http.get(f"/documents/{document_id}")
        assert page.status_code == 200 and f"Stint {SUFFIX}" in page.text
        assert ">Save</button>" not in page.text and ">Delete</button>" not in page.text
        assert "/ui/upload" not in page.text  # no Upload link in the navigation
        jobs_before = job_total(console.engine)
        refused = {
            "save": http.post(f"/documents/{document_id}", {"text": "overwritten", "version": "1"}),
            "delete": http.post(f"/documents/{document_id}/delete", {"confirmed": "yes"}),
            "delete page": http.get(f"/documents/{document_id}/delete"),
            "upload": http.upload(f"sneaky-{SUFFIX}.md", b"# sneaky\n\nnever stored", COLLECTION),
            "upload page": http.get("/upload"),
        }
        assert {name: r.status_code for name, r in refused.items()} == dict.fromkeys(refused, 403)
        assert "does not offer" in refused["save"].text
        stored = console.document(document_id)
        assert stored is not None and stored["version"] == 1 and "tideline" in stored["content"]
        assert job_total(console.engine) == jobs_before
        assert http.get(f"/search?q=stints+tideline+{SUFFIX}").status_code == 200  # reading still works
    finally:
        bridge.stop()


@pytest.mark.parametrize("store", ["directory", "redis"])
def test_a_token_removed_from_the_tokens_file_ends_its_console_session(
    engine: Service, tmp_path: Path, request: pytest.FixtureRequest, store: str,
) -> None:
    kept, removed = f"kept-token-{SUFFIX}-0123456789abcdef", f"removed-token-{SUFFIX}-0123456789abcdef"
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(tokens_toml(kept=(kept, '["kb:read"]'), removed=(removed, '["kb:read"]')))
    tokens.chmod(0o600)
    env = {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_TOKENS_FILE": str(tokens)}
    if store == "redis":
        env["KB_UPLOAD_STORE"] = request.getfixturevalue("redis_url")
    port = free_port()
    bridge = start_bridge(tmp_path, env, workers=2, port=port)
    try:
        ui = bridge.url + "/ui"
        stays, goes = ConsoleClient(ui, kept), ConsoleClient(ui, removed)
        for _ in range(4):  # both sessions hold on either worker
            assert stays.get("/search").status_code == goes.get("/search").status_code == 200
        # Revoke: the token leaves the file, and the bridge restarts to read it (KB_MCP_TOKENS_FILE is read at start).
        tokens.write_text(tokens_toml(kept=(kept, '["kb:read"]')))
        bridge.stop()
        bridge = start_bridge(tmp_path, env, workers=2, port=port)
        assert ConsoleClient.signed_out(goes.post("/sign-out", {}))
        assert ConsoleClient.signed_out(goes.get("/search"))
        assert ConsoleClient.signed_out(goes.get("/collections"))
        for _ in range(4):  # the session store outlived the restart: the other session goes on
            assert stays.get("/search").status_code == 200
    finally:
        bridge.stop()


UPLOADER = f"uploader-token-{SUFFIX}-0123456789abcdef"


def test_console_uploads_count_against_the_per_caller_upload_limits(console: Console, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(tokens_toml(uploader=(UPLOADER, '["kb:read", "kb:write"]')))
    tokens.chmod(0o600)
    bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": console.engine.url, "KB_API_KEY": ENGINE_KEY,
                                     "KB_MCP_TOKENS_FILE": str(tokens), "KB_UPLOAD_MAX_PER_CALLER": "1",
                                     "KB_UPLOAD_MAX_STAGED_BYTES": "4096"}, workers=1)
    try:
        http = ConsoleClient(bridge.url + "/ui", UPLOADER)
        jobs_before = job_total(console.engine)
        # More than the caller may stage at once (KB_UPLOAD_MAX_STAGED_BYTES), though under KB_UPLOAD_MAX_BYTES.
        too_big = http.upload(f"big-{SUFFIX}.md", b"# big\n\n" + b"sandpiper " * 500, COLLECTION)
        assert too_big.status_code == 429 and too_big.json()["error"].startswith("LIMIT_EXCEEDED"), too_big.text
        # The caller's one upload slot (KB_UPLOAD_MAX_PER_CALLER=1) held by an upload it began over MCP.
        started = modern_call(bridge.url, UPLOADER, "kb_upload_start",
                              {"filename": "held.md", "total_size": 10, "collection": COLLECTION})
        assert error_code(started) is None, started
        upload_id = started["result"]["structuredContent"]["upload_id"]  # type: ignore[index]
        held = http.upload(f"small-{SUFFIX}.md", b"# small\n\nknots feed in flocks", COLLECTION)
        assert held.status_code == 429 and "uploads in progress" in held.json()["error"], held.text
        assert job_total(console.engine) == jobs_before  # nothing reached the engine
        assert error_code(modern_call(bridge.url, UPLOADER, "kb_upload_cancel", {"upload_id": upload_id})) is None
        for attempt in range(2):  # a finished console upload frees its slot again
            sent = http.upload(f"small-{attempt}-{SUFFIX}.md", b"# small\n\nknots feed in flocks", COLLECTION)
            assert sent.status_code == 200 and isinstance(sent.json()["job"]["id"], int), sent.text
        assert job_total(console.engine) == jobs_before + 2
    finally:
        bridge.stop()
