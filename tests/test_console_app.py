"""The console built from the tool set the app is built from: create_web_app's `available` reaches the
console, so a tool left out of it is refused there as it is on /mcp (the end-to-end console tests run the
default set against the real engine)."""

from __future__ import annotations

import responses
from flask.testing import FlaskClient

from kb_bridge.runtime import Bridge
from kb_bridge.tools import registry
from kb_bridge.web.ops import create_web_app
from kb_bridge.testing.fake_engine import API
from kb_bridge.testing.fake_engine import document

JSON = {"Accept": "application/json"}


def signed_in(client: FlaskClient) -> FlaskClient:
    """The client signed in to a keyless bridge's console."""
    client.get("/ui/sign-in")
    pre = client.get_cookie("kb_console_signin", path="/ui")
    assert pre is not None
    assert client.post("/ui/sign-in", data={"csrf_token": pre.value, "token": ""}).status_code == 302
    return client


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
