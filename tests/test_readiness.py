"""/readyz (web/ops.py): what it says of an engine that is not ready."""

from __future__ import annotations

import requests
import responses

from kb_bridge.runtime import Bridge
from kb_bridge.testing.fake_engine import API
from kb_bridge.web.ops import create_web_app


def test_readyz_says_the_engine_is_reachable_when_it_answered_and_not_when_nothing_came_back(
    bridge: Bridge, engine: responses.RequestsMock,
) -> None:
    # Every failure was "reachable": false, so a key refused or a database away sent an operator after the network.
    client = create_web_app(bridge).test_client()
    for answer, reachable, code in (
        ({"status": 401, "json": {"error": {"code": "unauthorized", "message": "bad key"}}}, True, "ENGINE_AUTH_ERROR"),
        ({"status": 503, "json": {"error": {"code": "store_unavailable", "message": "database away"}}}, True,
         "ENGINE_UNAVAILABLE"),
        ({"body": requests.ConnectionError("refused")}, False, "ENGINE_UNAVAILABLE"),
    ):
        engine.upsert(responses.GET, f"{API}/status", **answer)
        ready = client.get("/readyz")
        assert ready.status_code == 503, answer
        assert ready.get_json()["engine"]["reachable"] is reachable, (answer, ready.get_json())
        assert ready.get_json()["engine"]["error"]["code"] == code, ready.get_json()
