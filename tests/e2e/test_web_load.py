"""The Flask side of a real gunicorn bridge (2 uvicorn workers) under overlapping keep-alive load: 8 clients,
each on its own kept-alive connection, 5,000 requests to console pages, static files, /healthz and /metrics,
and not one error (issue 32, item 8: asgiref's WsgiToAsgi answered some of them 500 "CurrentThreadExecutor
already quit or is broken").

Why keep-alive matters: a client that has a whole answer (its Content-Length) sends its next request on the
same connection at once, and the server may start that request from inside the previous answer's last
`send`. Under asgiref's adapter that `send` ran in a task carrying the previous request's thread executor,
which the next request then tried to use after it had quit (kb_bridge/web/wsgi.py says more).

The same load also caught a scrape of /metrics failing whole when it overlapped a worker creating one of its
metrics files (kb_bridge/metrics.py), once console and ops requests ran on several threads.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import requests

from kb_bridge.testing.processes import Service, start_bridge
from kb_bridge.testing.standin import StandInEngine

CLIENTS = 8
REQUESTS = 5_000
DEADLINE = 45.0  # seconds for the whole run; it takes about 6 s on a 2-core machine
# Pages that call the engine (a search, readiness) and pages that do not, static files, the metrics.
PATHS = ("/ui/search", "/ui/search?q=lapwing", "/ui/static/console.css", "/ui/static/console.js", "/ui/sign-in",
         "/healthz", "/readyz", "/metrics")


@pytest.fixture(scope="module")
def keyless_bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A bridge without KB_MCP_API_KEY (its console signs in with an empty token) over an engine stand-in."""
    tmp = tmp_path_factory.mktemp("web-load")
    with StandInEngine() as engine:
        service = start_bridge(tmp, {"KB_ENGINE_URL": engine.url, "KB_ENGINE_RETRIES": "1"}, workers=2)
        yield service
        service.stop()


def console_cookie(bridge: Service) -> str:
    """Sign in to a keyless bridge's console (empty token) and return the session cookie."""
    with requests.Session() as session:
        page = session.get(bridge.url + "/ui/sign-in", timeout=10)
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert token, page.text
        signed = session.post(bridge.url + "/ui/sign-in", data={"csrf_token": token.group(1), "token": ""},
                              allow_redirects=False, timeout=10)
        assert signed.status_code == 302, signed.text
        return str(session.cookies["kb_console"])


def test_8_clients_on_kept_alive_connections_get_no_errors_in_5000_requests(keyless_bridge: Service) -> None:
    cookie = console_cookie(keyless_bridge)
    assert requests.get(keyless_bridge.url + "/ui/search", cookies={"kb_console": cookie}, timeout=10).status_code == 200
    lock = threading.Lock()
    issued = 0
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    deadline = time.monotonic() + DEADLINE

    def take() -> int | None:
        nonlocal issued
        with lock:
            if issued >= REQUESTS or time.monotonic() > deadline:
                return None
            issued += 1
            return issued

    def client(n: int) -> None:
        with requests.Session() as session:  # one kept-alive connection per client
            session.cookies.set("kb_console", cookie, path="/ui")
            while (i := take()) is not None:
                path = PATHS[(i + n) % len(PATHS)]
                try:
                    response = session.get(keyless_bridge.url + path, allow_redirects=False, timeout=30)
                    body = response.content
                except requests.RequestException as exc:
                    with lock:
                        failures.append(f"{path}: {type(exc).__name__}: {exc}")
                    continue
                with lock:
                    statuses[response.status_code] += 1
                    if response.status_code >= 400:
                        failures.append(f"{path}: {response.status_code} {body[:200]!r}")

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE + 60)
    elapsed = time.monotonic() - started
    assert not any(thread.is_alive() for thread in threads)
    errors = "\n".join(line for line in keyless_bridge.log_path.read_text().splitlines() if '"level": "error"' in line)
    assert not failures, f"{len(failures)} of {issued} failed in {elapsed:.1f}s: {Counter(failures).most_common(5)}\n{errors[:6000]}"
    assert sum(statuses.values()) == REQUESTS, f"only {sum(statuses.values())} requests in {elapsed:.1f}s ({statuses})"
    assert "CurrentThreadExecutor" not in keyless_bridge.log_path.read_text()
