"""The console built from the tool set the app is built from: create_web_app's `available` reaches the
console, so a tool left out of it is refused there as it is on /mcp (the end-to-end console tests run the
default set against the real engine)."""

from __future__ import annotations

import re
from io import BytesIO

import responses
from flask.testing import FlaskClient

from kb_bridge.runtime import Bridge
from kb_bridge.tools import registry
from kb_bridge.web.ops import create_web_app
from kb_bridge.testing.fake_engine import API, calls_to, document, job

JSON = {"Accept": "application/json"}


def signed_in(client: FlaskClient) -> FlaskClient:
    """The client signed in to a keyless bridge's console."""
    client.get("/ui/sign-in")
    pre = client.get_cookie("kb_console_signin", path="/ui")
    assert pre is not None
    assert client.post("/ui/sign-in", data={"csrf_token": pre.value, "token": ""}).status_code == 302
    return client


def csrf_of(client: FlaskClient) -> str:
    """The session's CSRF token, from the sign-out form every page carries (an error page needs no engine)."""
    found = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/ui/jobs?page=x").get_data(as_text=True))
    assert found is not None
    return found.group(1)


def test_a_tool_outside_the_apps_tool_set_is_not_offered_by_its_console(
    bridge: Bridge, engine: responses.RequestsMock,
) -> None:
    engine.get(f"{API}/documents/42", json=document(42, title="Plover"))
    engine.get(f"{API}/documents/42/versions", json={"id": 42, "versions": []})
    offered = signed_in(create_web_app(bridge).test_client())
    assert "Delete a document" in offered.get("/ui/documents/42/delete").get_data(as_text=True)

    without_delete = tuple(spec for spec in registry.ALL_TOOLS if spec.name != "kb_delete")
    refused = signed_in(create_web_app(bridge, available=without_delete).test_client())
    answer = refused.get("/ui/documents/42/delete", headers=JSON)
    assert answer.status_code == 403
    assert "does not offer kb_delete" in answer.get_json()["error"]


def test_a_later_file_refused_shows_the_files_already_sent_beside_the_refusal(
    bridge: Bridge, engine: responses.RequestsMock,
) -> None:
    """A refused file stops the form; the files before it are queued all the same, so the answer lists them
    (HTML and JSON) with the refusal and its status; the files after it are never sent."""
    engine.post(f"{API}/jobs", status=202, json=job(31, type="file", filename="first.md"))
    client = signed_in(create_web_app(bridge).test_client())
    csrf = csrf_of(client)

    def form() -> dict[str, object]:
        return {"csrf_token": csrf, "collection": "documents",
                "file": [(BytesIO(b"# First\n\nsent"), "first.md"), (BytesIO(b"MZ"), "second.exe"),
                         (BytesIO(b"# Third\n\nnever sent"), "third.md")]}

    answer = client.post("/ui/upload", data=form(), headers=JSON)
    assert answer.status_code == 400
    reply = answer.get_json()
    assert [sent["job"]["id"] for sent in reply["jobs"]] == [31] and reply["url"] == "/ui/jobs/31"
    assert reply["error"].startswith("second.exe was refused (VALIDATION_ERROR: filename: ")
    page = client.post("/ui/upload", data=form())
    assert page.status_code == 400
    html = page.get_data(as_text=True)
    assert '<a href="/ui/jobs/31">first.md</a>: job 31' in html and "second.exe was refused" in html
    assert "third.md" not in html
    assert len(calls_to(engine, "POST", "/jobs")) == 2  # the first file of each form; never the third


def test_signing_in_again_ends_the_previous_session(bridge: Bridge, engine: responses.RequestsMock) -> None:
    client = signed_in(create_web_app(bridge).test_client())
    first = client.get_cookie("kb_console", path="/ui")
    assert first is not None
    # The sign-in form posted again (from a tab opened before), with the first session's cookie still sent.
    client.set_cookie("kb_console_signin", "again", path="/ui")
    assert client.post("/ui/sign-in", data={"csrf_token": "again", "token": ""}).status_code == 302
    second = client.get_cookie("kb_console", path="/ui")
    assert second is not None and second.value != first.value
    assert client.get("/ui/jobs?page=x").status_code == 400  # the new session stands

    old = create_web_app(bridge).test_client()
    old.set_cookie("kb_console", first.value, path="/ui")
    answer = old.get("/ui/jobs?page=x")
    assert answer.status_code == 302 and answer.headers["Location"].endswith("/ui/sign-in")


def test_a_console_path_no_view_matches_gets_the_consoles_error_page_and_headers(bridge: Bridge) -> None:
    """Routing errors reach the app's handlers, not the blueprint's: a /ui/ path still gets the console's
    answer (its security headers, no caching), and any other path the app's JSON."""
    client = create_web_app(bridge).test_client()
    for method, path, status in (("GET", "/ui/nonexistent", 404), ("GET", "/ui/documents/abc", 404),
                                 ("PUT", "/ui/search", 405)):
        page = client.open(path, method=method)
        json_answer = client.open(path, method=method, headers=JSON)
        assert (page.status_code, json_answer.status_code) == (status, status), path
        assert "<h1>Refused</h1>" in page.get_data(as_text=True) and "error" in json_answer.get_json()
        for answer in (page, json_answer):
            assert answer.headers["Content-Security-Policy"].startswith("default-src 'self'")
            assert answer.headers["X-Frame-Options"] == "DENY" and answer.headers["X-Content-Type-Options"] == "nosniff"
            assert answer.headers["Cache-Control"] == "no-store"
    elsewhere = client.get("/nonexistent")
    assert elsewhere.status_code == 404 and elsewhere.get_json() == {"error": "not_found"}
    assert "Content-Security-Policy" not in elsewhere.headers


def test_a_redis_session_store_out_of_reach_is_the_consoles_error_page_not_an_internal_error(
    bridge: Bridge, engine: responses.RequestsMock,
) -> None:
    """With KB_UPLOAD_STORE on Redis the console's sessions live there too; Redis out of reach was a bare 500 on
    every console page. It is the staging area failing: the console's 502 page, naming what failed."""
    import dataclasses
    import socket

    from kb_bridge.web.console.sessions import RedisSessions, Sessions
    from kb_bridge.web.console.state import EXTENSION

    with socket.socket() as probe:  # a loopback port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app = create_web_app(bridge)
    console = app.extensions[EXTENSION]
    app.extensions[EXTENSION] = dataclasses.replace(
        console, sessions=Sessions(RedisSessions(f"redis://127.0.0.1:{port}/0?socket_connect_timeout=1")))
    client = app.test_client()
    client.set_cookie("kb_console", "a-session-id", path="/ui")
    page = client.get("/ui/")
    assert page.status_code == 502
    assert "session store (Redis) cannot be reached" in page.get_data(as_text=True)
    answer = client.get("/ui/", headers=JSON)
    assert answer.status_code == 502 and "STORAGE_ERROR" in answer.get_json()["error"]
