"""Whose X-Forwarded-For the bridge believes: the access log's `client` is the peer's address unless the peer is
a proxy named in KB_FORWARDED_ALLOW_IPS. gunicorn's default trusted loopback, and on the default loopback bind
every client is loopback: any client chose the address logged for it (a refused token logged as someone else's)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import requests

from kb_bridge.testing.processes import Service, start_bridge, wait_until

KEY = "forwarded-test-key-0123456789"


def logged_client(bridge: Service, request_id: str) -> str:
    """The `client` of the access line of the request with this id, once it is written."""
    found: list[str] = []

    def written() -> bool:
        for line in bridge.log().splitlines():
            if line.startswith("{") and request_id in line:
                event = json.loads(line)
                if event.get("event") == "http_request" and event.get("request_id") == request_id:
                    found.append(event["client"])
                    return True
        return False

    wait_until(written, 10, what="the request's access line")
    return found[0]


def refused_from(bridge: Service, forwarded: str) -> str:
    request_id = uuid.uuid4().hex[:16]
    response = requests.post(bridge.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=10,
                             headers={"Authorization": "Bearer a-guessed-token-0123456789", "X-Request-Id": request_id,
                                      "X-Forwarded-For": forwarded})
    assert response.status_code == 401
    return logged_client(bridge, request_id)


@pytest.mark.parametrize("worker_class", ["uvicorn", "asgi"])
def test_a_client_cannot_choose_the_address_logged_for_it(tmp_path: Path, worker_class: str) -> None:
    bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": "http://127.0.0.1:9", "KB_MCP_API_KEY": KEY,
                                     "KB_WORKER_CLASS": worker_class}, workers=1)
    try:
        assert refused_from(bridge, "198.51.100.7") == "127.0.0.1"
    finally:
        bridge.stop()


def test_a_proxy_named_in_kb_forwarded_allow_ips_passes_on_its_clients_address(tmp_path: Path) -> None:
    bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": "http://127.0.0.1:9", "KB_MCP_API_KEY": KEY,
                                     "KB_FORWARDED_ALLOW_IPS": "127.0.0.1"}, workers=1)
    try:
        assert refused_from(bridge, "198.51.100.7") == "198.51.100.7"
    finally:
        bridge.stop()
