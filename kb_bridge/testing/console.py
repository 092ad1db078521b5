"""The web console over plain HTTP with `requests`, as a script (or an attacker) would use it: sign in through
the form, send the CSRF token, upload a file. For end-to-end tests that need no browser; the browser tests
(tests/e2e/test_console.py) drive the same pages in chromium."""

from __future__ import annotations

import re
from typing import Any

import requests

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


class ConsoleClient:
    """One signed-in console session (the session cookie lives in `http`)."""

    def __init__(self, ui: str, token: str, timeout: float = 60) -> None:
        self.ui = ui.rstrip("/")
        self.timeout = timeout
        self.http = requests.Session()
        form = self.http.get(self.ui + "/sign-in", timeout=timeout)
        done = self.http.post(self.ui + "/sign-in", data={"csrf_token": _csrf(form.text), "token": token},
                              allow_redirects=False, timeout=timeout)
        if done.status_code != 302 or not done.headers["Location"].endswith("/ui/search"):
            raise AssertionError(f"sign-in refused ({done.status_code})")
        self.csrf = _csrf(self.get("/search").text)

    def get(self, path: str, json: bool = False, **kwargs: Any) -> requests.Response:
        """GET a console path without following redirects (a redirect to sign-in is what tests look for)."""
        headers = {"Accept": "application/json"} if json else {}
        return self.http.get(self.ui + path, headers=headers, allow_redirects=False, timeout=self.timeout, **kwargs)

    def post(self, path: str, data: dict[str, str], json: bool = False, **kwargs: Any) -> requests.Response:
        """POST a form with the session's CSRF token."""
        headers = {"Accept": "application/json"} if json else {}
        return self.http.post(self.ui + path, data={"csrf_token": self.csrf, **data}, headers=headers,
                              allow_redirects=False, timeout=self.timeout, **kwargs)

    def upload(self, filename: str, data: bytes, collection: str) -> requests.Response:
        """The upload form as console.js sends it (asking for JSON)."""
        return self.post("/upload", {"collection": collection}, json=True, files={"file": (filename, data)})

    @staticmethod
    def signed_out(response: requests.Response) -> bool:
        """Whether the console answered as to a request without a session: GET → sign-in, POST → 401."""
        if response.request.method == "GET":
            return response.status_code == 302 and response.headers["Location"].endswith("/ui/sign-in")
        return response.status_code == 401


def _csrf(page: str) -> str:
    found = _CSRF.search(page)
    if found is None:
        raise AssertionError("no CSRF token on the page")
    return found.group(1)
