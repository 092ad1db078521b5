"""The console's browser tests' shared steps (tests/e2e/test_console*.py): Debian's chromium under
Playwright (its own browser download is never used), signing in through the form, and moving focus with
the Tab key alone, and axe-core's accessibility check. Playwright is imported where it is used, so that this module
imports without it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kb_bridge.testing.processes import REPO, require

# axe-core comes with the TypeScript tests' pinned node packages (tests/ts/package.json).
AXE = REPO / "tests" / "ts" / "node_modules" / "axe-core" / "axe.min.js"


@contextmanager
def chromium() -> Iterator[Any]:
    """The distribution's chromium, launched headless through Playwright, closed afterwards."""
    from playwright.sync_api import sync_playwright

    executable = require("chromium")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield launched
        launched.close()


def sign_in(browser: Any, ui: str, token: str, start: str = "/sign-in", **context: Any) -> Any:
    """A new page in a new browser context, signed in to the console at `ui` with `token` through the form
    reached from `start`; it waits for the search page the console lands on."""
    page = browser.new_context(**context).new_page()
    page.goto(ui + start)
    page.get_by_label("Access token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/ui/search")
    return page


def tab_to(page: Any, selector: str, presses: int) -> None:
    """Press Tab until the focused element matches `selector`, at most `presses` times."""
    for _ in range(presses):
        page.keyboard.press("Tab")
        if page.evaluate("(s) => document.activeElement && document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"Tab never reached {selector}")


def axe_violations(page: Any, ui: str, paths: list[str]) -> dict[str, list[str]]:
    """axe-core's serious and critical violations on each console page, by path ({} when there are none).
    The page's context must bypass the console's CSP to have axe-core injected (the CSP stays as served)."""
    found: dict[str, list[str]] = {}
    for path in paths:
        page.goto(ui + path)
        page.add_script_tag(path=str(AXE))
        result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
        bad = [f"{v['id']} ({v['impact']}): {v['help']}" for v in result["violations"]
               if v["impact"] in ("serious", "critical")]
        if bad:
            found[path] = bad
    return found
