"""Generated raw HTTP against a real gunicorn bridge: arbitrary bodies, JSON-RPC envelopes with
arbitrary methods and params, and arbitrary headers.

Invariants: never a 5xx other than 503, never a traceback or a secret in a response, and the
engine (a recording stand-in) never receives a request for a call whose arguments were invalid.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kb_bridge.tools import registry as tools
from kb_bridge.errors import InvalidArgument
from kb_bridge.tools.validation import ArgumentValidator
from kb_bridge.testing.processes import Service, start_bridge
from kb_bridge.testing.standin import StandInEngine
from kb_bridge.testing.strategies import JSON, TEXT, arguments_for

TOKEN = "agent-token-fuzz-0123456789abcdef"
ENGINE_KEY = "engine-key-fuzz-0123456789abcdef"
TOOL_NAMES = sorted(spec.name for spec in tools.ALL_TOOLS)
VALIDATORS = {spec.name: ArgumentValidator(spec.input_schema) for spec in tools.ALL_TOOLS}
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
METHODS = st.sampled_from(["initialize", "tools/list", "tools/call", "resources/read", "resources/list", "prompts/get",
                           "completion/complete", "ping", "server/discover", "logging/setLevel", "notifications/initialized"])


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, StandInEngine]]:
    tmp: Path = tmp_path_factory.mktemp("fuzz-http")
    with StandInEngine() as engine:
        env = {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN, "KB_API_KEY": ENGINE_KEY, "KB_LOG_LEVEL": "WARNING"}
        bridge = start_bridge(tmp, env, workers=2)
        try:
            yield bridge, engine
        finally:
            bridge.stop()


def envelope(method: str, params: Any, request_id: Any, modern: bool) -> Any:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if request_id is not None:
        message["id"] = request_id
    if params is not None:
        message["params"] = params
        if modern and isinstance(params, dict):
            params.setdefault("_meta", MODERN_META)
    return message


BODIES = st.one_of(
    st.binary(max_size=300),
    TEXT.map(str.encode),
    JSON.map(lambda v: json.dumps(v).encode()),
    st.builds(envelope, METHODS, st.one_of(st.none(), JSON), st.one_of(st.none(), st.integers(), TEXT), st.booleans()).map(
        lambda v: json.dumps(v).encode()
    ),
)
HEADERS = st.fixed_dictionaries(
    {},
    optional={
        "Content-Type": st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain", "", "application/x-www-form-urlencoded", "multipart/form-data"]),
        "Accept": st.sampled_from(["application/json, text/event-stream", "application/json", "text/event-stream", "*/*", ""]),
        "MCP-Protocol-Version": st.sampled_from(["2026-07-28", "2025-11-25", "2025-06-18", "1999-01-01", "", "garbage"]),
        "Mcp-Method": st.one_of(METHODS, st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=20)),
        "Mcp-Name": st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=20),
        "Mcp-Session-Id": st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=40),
        "Origin": st.sampled_from(["https://evil.example", "null", "http://localhost:1"]),
        "Authorization": st.sampled_from([f"Bearer {TOKEN}", f"Bearer {TOKEN}", "Bearer nope", "Basic abc", ""]),
    },
)


def assert_safe(response: requests.Response) -> None:
    assert response.status_code < 500 or response.status_code == 503, (response.status_code, response.text[:300])
    body = response.text
    assert "Traceback" not in body and TOKEN not in body and ENGINE_KEY not in body


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None)
@given(body=BODIES, headers=HEADERS)
def test_arbitrary_requests_never_break_the_server(target: tuple[Service, StandInEngine], body: bytes, headers: dict[str, str]) -> None:
    bridge, _ = target
    response = requests.post(bridge.url + "/mcp", data=body, headers=headers, timeout=30)
    assert_safe(response)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None)
@given(data=st.data(), name=st.sampled_from(TOOL_NAMES))
def test_arbitrary_tool_calls_reach_the_engine_only_when_valid(target: tuple[Service, StandInEngine], data: st.DataObject, name: str) -> None:
    bridge, engine = target
    arguments = data.draw(arguments_for(next(s for s in tools.ALL_TOOLS if s.name == name).input_schema))
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": arguments, "_meta": MODERN_META}}
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": name}
    before = len(engine.received)
    response = requests.post(bridge.url + "/mcp", data=json.dumps(body), headers=headers, timeout=30)
    assert_safe(response)
    if len(engine.received) > before:
        try:
            # Null arguments are absent arguments in MCP: the server reads them as {}.
            VALIDATORS[name].check({} if arguments is None else arguments)
        except InvalidArgument as exc:  # pragma: no cover - the failure being guarded against
            pytest.fail(f"{name} reached the engine with invalid arguments: {exc.message}")
