"""The door in front of every path of a real gunicorn bridge, not only /mcp (issue 32, items 1 and 7).

Item 1: the console, /metrics, /readyz, /healthz, static files and the OAuth metadata answer a Host not
allowed with 421 and a cross-site Origin with 403, exactly as /mcp does, before anything else runs; so a
keyless bridge's console is not reachable through a DNS-rebinding host name.

Item 7: every path refuses a body over its own limit before reading it: /healthz, /readyz, /metrics and the
metadata take no body at all; console forms take a form's worth (a note's text at its largest); the upload
form takes the upload limit. A declared Content-Length over the limit is answered at once without reading a
byte of the body; a chunked body is counted as it arrives and refused at the limit. The tests prove "before
reading" by never sending the body (or never ending it): the answer can only come from a server that did
not wait for it.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests

from kb_bridge.testing.fake_engine import document, job
from kb_bridge.testing.processes import Service, free_port, start_bridge
from kb_bridge.testing.standin import StandInEngine

TOKEN = "web-door-token-0123456789abcdef"
MIB = 1024 * 1024
UPLOAD_MAX = 4 * MIB  # KB_UPLOAD_MAX_BYTES of the bridges here: the upload form's limit is this plus 1 MiB
NOTE_ID = 7
NEW_NOTE_JOB = 31
MAX_NOTE_CHARS = 1_000_000  # tools/arguments.py NOTE_TEXT maxLength

GUARDED_PATHS = ["/ui/", "/ui/sign-in", "/ui/search", "/ui/static/console.css", "/metrics", "/readyz", "/healthz",
                 "/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp", "/no-such-page"]


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    closed: bool  # the server closed the connection after answering


def port_of(service: Service) -> int:
    return int(service.url.rsplit(":", 1)[1])


def exchange(service: Service, head: str, body: bytes = b"", timeout: float = 10.0) -> Answer:
    """Send a request head and `body` (which may be only part of what the head announces) on a fresh
    connection, read the answer, and see whether the server then closes the connection. A server that
    waits for the rest of the body never answers: the read times out and the test fails."""
    with socket.create_connection(("127.0.0.1", port_of(service)), timeout=timeout) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode("latin-1") + b"\r\n" + body)
        reader = sock.makefile("rb")
        status_line = reader.readline()
        assert status_line.startswith(b"HTTP/1.1 "), status_line
        headers: dict[str, str] = {}
        while (line := reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        content = reader.read(int(headers.get("content-length", "0")))
        try:
            closed = reader.read(1) == b""
        except (TimeoutError, ConnectionResetError):
            closed = False
        return Answer(int(status_line.split()[1]), headers, content, closed)


def head(method: str, path: str, port: int, *lines: str) -> str:
    return "\n".join([f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", *lines, ""])


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def sign_in(bridge: Service, token: str = "") -> requests.Session:
    """A console session (the sign-in form's double-submit token, then the access token)."""
    session = requests.Session()
    page = session.get(bridge.url + "/ui/sign-in", timeout=10)
    found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert found, page.text
    signed = session.post(bridge.url + "/ui/sign-in", data={"csrf_token": found.group(1), "token": token},
                          allow_redirects=False, timeout=10)
    assert signed.status_code == 302, signed.text
    return session


def stand_in_answers(method: str, path: str) -> tuple[int, Any] | None:
    """The engine stand-in knows one note and no collections, and takes any update of it (the bridge's own checks are what is tested)."""
    if method == "GET" and path.startswith(f"/api/v1/documents/{NOTE_ID}/versions"):
        return 200, {"versions": []}
    if method == "GET" and path.startswith(f"/api/v1/documents/{NOTE_ID}"):
        return 200, document(NOTE_ID, content="the note as it was", version=1)
    if method == "PATCH" and path.startswith(f"/api/v1/notes/{NOTE_ID}"):
        return 200, document(NOTE_ID, version=2)
    if method == "GET" and path.startswith("/api/v1/tags"):
        return 200, {"tags": []}  # a note's page offers the collections it may move to (issue 39)
    if method == "POST" and path == "/api/v1/jobs":
        return 202, job(NEW_NOTE_JOB)  # a new note, queued
    return None


@pytest.fixture(scope="module")
def engine() -> Iterator[StandInEngine]:
    with StandInEngine() as stand_in:
        stand_in.custom = stand_in_answers
        yield stand_in


@pytest.fixture(scope="module")
def keyless(engine: StandInEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A bridge without any auth configured: its console signs in with an empty token, /metrics is open."""
    tmp = tmp_path_factory.mktemp("web-door-keyless")
    service = start_bridge(tmp, {"KB_ENGINE_URL": engine.url, "KB_ENGINE_RETRIES": "1",
                                 "KB_UPLOAD_MAX_BYTES": str(UPLOAD_MAX)}, workers=2)
    yield service
    service.stop()


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A bridge with a key and OAuth (so it serves the RFC 9728 metadata); the issuer is down, which only
    matters to tokens, not to the door."""
    tmp = tmp_path_factory.mktemp("web-door-keyed")
    port = free_port()
    service = start_bridge(tmp, {
        "KB_ENGINE_URL": f"http://127.0.0.1:{free_port()}", "KB_ENGINE_RETRIES": "1", "KB_MCP_API_KEY": TOKEN,
        "KB_OAUTH_ISSUER": f"http://127.0.0.1:{free_port()}", "KB_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "KB_UPLOAD_MAX_BYTES": str(UPLOAD_MAX),
    }, workers=1, port=port)
    yield service
    service.stop()


# --- item 1: Host and Origin on every path ---------------------------------------------------------------


@pytest.mark.parametrize("path", GUARDED_PATHS)
@pytest.mark.parametrize("which", ["keyless", "keyed"])
def test_1_a_foreign_host_is_421_on_every_path(request: pytest.FixtureRequest, which: str, path: str) -> None:
    bridge: Service = request.getfixturevalue(which)
    response = requests.get(bridge.url + path, headers={"Host": "evil.example"}, allow_redirects=False, timeout=10)
    assert response.status_code == 421
    assert response.json() == {"error": "misdirected_request", "error_description": "Host not allowed"}
    assert "set-cookie" not in response.headers


@pytest.mark.parametrize("path", GUARDED_PATHS)
@pytest.mark.parametrize("origin", ["https://evil.example", "null"])
def test_1_a_cross_site_origin_is_403_on_every_path(keyed: Service, path: str, origin: str) -> None:
    response = requests.get(keyed.url + path, headers={"Origin": origin}, allow_redirects=False, timeout=10)
    assert response.status_code == 403
    assert response.json() == {"error": "forbidden", "error_description": "Origin not allowed"}


@pytest.mark.parametrize("path", ["/ui/sign-in", "/healthz", "/.well-known/oauth-protected-resource/mcp"])
def test_1_an_allowed_host_and_origin_pass(keyed: Service, path: str) -> None:
    response = requests.get(keyed.url + path, headers={"Origin": f"http://localhost:{port_of(keyed)}"}, timeout=10)
    assert response.status_code == 200


def test_1_a_keyless_bridges_console_is_not_reachable_through_a_rebinding_host_name(keyless: Service) -> None:
    """A page on evil.example whose name now resolves to 127.0.0.1 loads the console and posts its sign-in
    form (empty token: no auth is configured). The browser sends Host: evil.example (and, for the form post,
    its own Origin), so every step is refused before the console runs, and no session is ever made."""
    rebinding = {"Host": "evil.example"}
    page = requests.get(keyless.url + "/ui/", headers=rebinding, allow_redirects=False, timeout=10)
    assert page.status_code == 421
    form = requests.get(keyless.url + "/ui/sign-in", headers=rebinding, timeout=10)
    assert form.status_code == 421 and "csrf_token" not in form.text and "set-cookie" not in form.headers
    for headers in (rebinding, {**rebinding, "Origin": "http://evil.example"}):
        posted = requests.post(keyless.url + "/ui/sign-in", data={"csrf_token": "x", "token": ""}, headers=headers,
                               cookies={"kb_console_signin": "x"}, allow_redirects=False, timeout=10)
        assert posted.status_code == 421 and "set-cookie" not in posted.headers
    with sign_in(keyless) as session:  # the same bridge, reached by its own name, signs in as before
        assert session.get(keyless.url + "/ui/search", timeout=10).status_code == 200
        # A signed-in browser's cookie does not help a rebinding page either.
        assert session.get(keyless.url + "/ui/search", headers=rebinding, timeout=10).status_code == 421


# A `name:*` pattern takes a port: 1 to 5 ASCII digits, 1-65535. str.isdigit() took superscripts and other
# scripts' digits, and any number of digits (the reviewer's `Host: localhost:²³` and `localhost:99999999`).
NOT_PORTS = ["\u00b2\u00b3", "\u00b9", "99999999", "0", "65536", "00018401", "", "+80", " 80"]


@pytest.mark.parametrize("port", NOT_PORTS)
def test_1_a_host_or_origin_whose_port_is_not_a_port_is_refused(keyless: Service, port: str) -> None:
    own = port_of(keyless)
    host = exchange(keyless, head("GET", "/healthz", own, "Connection: close").replace(
        f"Host: 127.0.0.1:{own}", f"Host: localhost:{port}"))
    assert host.status == 421, port
    origin = exchange(keyless, head("GET", "/healthz", own, "Connection: close", f"Origin: http://localhost:{port}"))
    assert origin.status == 403, port


@pytest.mark.parametrize("port", ["1", "80", "65535"])
def test_1_any_port_of_an_allowed_name_passes(keyless: Service, port: str) -> None:
    own = port_of(keyless)
    answer = exchange(keyless, head("GET", "/healthz", own, "Connection: close", f"Origin: http://localhost:{port}").replace(
        f"Host: 127.0.0.1:{own}", f"Host: localhost:{port}"))
    assert answer.status == 200


def test_1_the_guard_runs_before_the_body_limit_and_counts_its_refusals(keyless: Service) -> None:
    port = port_of(keyless)
    answer = exchange(keyless, head("POST", "/ui/upload", port, f"Content-Length: {256 * MIB}").replace(
        f"Host: 127.0.0.1:{port}", "Host: evil.example"))
    assert answer.status == 421
    metrics = requests.get(keyless.url + "/metrics", timeout=10).text
    refused = re.search(r'kb_bridge_auth_failures_total\{reason="host"\} (\d+)', metrics)
    assert refused and float(refused.group(1)) >= 1


# --- item 7: body limits on every path --------------------------------------------------------------------


def assert_refused_unread(answer: Answer) -> None:
    assert answer.status == 413, answer
    assert json.loads(answer.body)["error"] == "payload_too_large"
    assert answer.headers.get("connection") == "close" and answer.closed  # the rest is never read


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
def test_7_paths_without_a_body_refuse_a_declared_one_unread(keyless: Service, path: str) -> None:
    port = port_of(keyless)
    # 256 MiB announced and none of it sent: the answer cannot have waited for it.
    assert_refused_unread(exchange(keyless, head("POST", path, port, f"Content-Length: {256 * MIB}")))
    assert_refused_unread(exchange(keyless, head("GET", path, port, "Content-Length: 1"), b"x"))


@pytest.mark.parametrize("path", ["/healthz", "/metrics"])
def test_7_paths_without_a_body_refuse_a_chunked_one(keyless: Service, path: str) -> None:
    # One chunk and no end: the server answers without waiting for the rest.
    answer = exchange(keyless, head("POST", path, port_of(keyless), "Transfer-Encoding: chunked"), chunk(b"x" * 16))
    assert_refused_unread(answer)


@pytest.mark.parametrize("path", ["/MCP", "//mcp", "/mcp//", "/no-such-page", "/ui/no-such-page"])
def test_7_a_path_that_does_not_exist_is_404_not_413_and_its_body_is_left_unread(keyless: Service, path: str) -> None:
    """Before: 413 "this path takes no request body" for a POST to /MCP or //mcp, sending a client that mistyped
    the endpoint after the wrong problem. The body is still never read: none of it is sent here."""
    port = port_of(keyless)
    for answer in (exchange(keyless, head("POST", path, port, "Content-Type: application/json", f"Content-Length: {256 * MIB}")),
                   exchange(keyless, head("POST", path, port, "Transfer-Encoding: chunked"), chunk(b"x" * 16))):
        assert answer.status == 404, (path, answer)
        assert answer.headers.get("connection") == "close" and answer.closed


def test_7_the_metadata_takes_no_body(keyed: Service) -> None:
    answer = exchange(keyed, head("POST", "/.well-known/oauth-protected-resource/mcp", port_of(keyed), "Content-Length: 10"))
    assert_refused_unread(answer)


@pytest.mark.parametrize("path", ["/ui/sign-in", "/ui/sign-out", "/ui/search", f"/ui/documents/{NOTE_ID}/delete"])
def test_7_console_forms_refuse_a_declared_body_over_their_limit_unread(keyless: Service, path: str) -> None:
    answer = exchange(keyless, head("POST", path, port_of(keyless), "Content-Type: application/x-www-form-urlencoded",
                                    f"Content-Length: {MIB + 1}"))
    assert_refused_unread(answer)


def test_7_a_chunked_console_form_is_refused_at_its_limit(keyless: Service) -> None:
    """Counted as it streams: just over the limit is sent, never the end of the body."""
    body = b"".join(chunk(b"t" * 65536) for _ in range(16)) + chunk(b"t")  # 1 MiB + 1 byte, unterminated
    answer = exchange(keyless, head("POST", "/ui/sign-in", port_of(keyless),
                                    "Content-Type: application/x-www-form-urlencoded", "Transfer-Encoding: chunked"), body)
    assert_refused_unread(answer)


def test_7_the_upload_form_refuses_a_body_over_the_upload_limit_unread(keyless: Service) -> None:
    port = port_of(keyless)
    for declared in (UPLOAD_MAX + MIB + 1, 256 * MIB):
        answer = exchange(keyless, head("POST", "/ui/upload", port, "Content-Type: multipart/form-data; boundary=b",
                                        f"Content-Length: {declared}"))
        assert_refused_unread(answer)


def test_7_a_body_within_the_limit_still_reaches_the_console(keyless: Service) -> None:
    """The upload limit is the upload's, not a form's: a declared body between 1 MiB and the upload limit
    is not refused at the door (the console then answers it; unauthenticated here: 401)."""
    answer = exchange(keyless, head("POST", "/ui/upload", port_of(keyless), "Content-Type: multipart/form-data; boundary=b",
                                    f"Content-Length: {2 * MIB}", "Accept: application/json"))
    assert answer.status == 401  # answered before the body it never read: and then that connection closes
    assert answer.headers.get("connection") == "close" and answer.closed


@pytest.mark.parametrize("character", ["n", "\U0001f426"])
def test_7_saving_a_note_of_the_largest_size_from_the_console_still_works(keyless: Service, engine: StandInEngine,
                                                                         character: str) -> None:
    """A note at the tools' maximum (1,000,000 characters), even of 4-byte characters (12 MB once
    percent-encoded in the form), is saved: the door's form limit is sized for it."""
    with sign_in(keyless) as session:
        saved = session.post(f"{keyless.url}/ui/documents/{NOTE_ID}", allow_redirects=False, timeout=60,
                             data={"csrf_token": form_token(session, f"{keyless.url}/ui/documents/{NOTE_ID}"),
                                   "version": "1", "text": character * MAX_NOTE_CHARS})
    assert saved.status_code == 302 and saved.headers["location"].endswith("saved=1"), saved.text[:500]
    assert f"PATCH /api/v1/notes/{NOTE_ID}" in engine.received


def form_token(session: requests.Session, page_url: str) -> str:
    """The CSRF token of the console form at `page_url`."""
    page = session.get(page_url, timeout=10)
    assert page.status_code == 200, page.text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert csrf
    return csrf.group(1)


@pytest.mark.parametrize("character", ["é", "\U0001f426"])
def test_7_a_new_note_of_the_largest_size_from_the_console_is_sent(keyless: Service, engine: StandInEngine,
                                                                   character: str) -> None:
    """The New note form takes the same largest note as saving one: it was held to a small form's 1 MiB, so a
    note kb_addnote takes (a million characters, 6 or 12 MB once percent-encoded) was refused 413 at the door."""
    with sign_in(keyless) as session:
        sent = session.post(f"{keyless.url}/ui/notes/new", allow_redirects=False, timeout=60,
                            data={"csrf_token": form_token(session, f"{keyless.url}/ui/notes/new"), "title": "Largest",
                                  "collection": "memory", "tags": "", "text": character * MAX_NOTE_CHARS})
    assert sent.status_code == 302 and sent.headers["location"].endswith(f"/ui/jobs/{NEW_NOTE_JOB}"), sent.text[:500]
    assert "POST /api/v1/jobs" in engine.received
