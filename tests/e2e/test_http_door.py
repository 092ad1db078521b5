"""The /mcp door of a real gunicorn bridge: auth, DNS-rebinding guard, protocol and body checks
(reliability checklist 1-11). The engine is down here: none of this may depend on it."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from kb_bridge.testing.mcp_client import connect
from kb_bridge.testing.processes import Service, free_port, start_bridge, wait_until

TOKEN = "agent-token-0123456789abcdef"
ENGINE_KEY = "engine-key-0123456789abcdef"
INIT = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("door")
    env = {
        "KB_MCP_API_KEY": TOKEN,
        "KB_API_KEY": ENGINE_KEY,
        "KB_ENGINE_URL": f"http://127.0.0.1:{free_port()}",  # nothing listens there
        "KB_ENGINE_RETRIES": "1",
        "KB_MCP_MAX_BODY_BYTES": str(4 * 1024 * 1024),
    }
    service = start_bridge(tmp, env)
    yield service
    service.stop()


def post(bridge: Service, payload: object = INIT, headers: dict[str, str] | None = None, path: str = "/mcp") -> requests.Response:
    merged = {**HEADERS, "Authorization": f"Bearer {TOKEN}", **(headers or {})}
    data = payload if isinstance(payload, (bytes, str)) else json.dumps(payload)
    return requests.post(bridge.url + path, data=data, headers={k: v for k, v in merged.items() if v is not None}, timeout=10)


def test_1_no_authorization_is_401_with_challenge(bridge: Service) -> None:
    response = post(bridge, headers={"Authorization": None})  # type: ignore[dict-item]
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("value", ["Bearer wrong-token-0123456789", "Bearer ", "Basic dXNlcjpwYXNz", "Bearer", TOKEN])
def test_2_wrong_or_malformed_credentials_are_401(bridge: Service, value: str) -> None:
    assert post(bridge, headers={"Authorization": value}).status_code == 401


def test_2_scheme_is_case_insensitive(bridge: Service) -> None:
    assert post(bridge, headers={"Authorization": f"bearer {TOKEN}"}).status_code == 200


def test_3_non_ascii_token_is_401_not_500(bridge: Service) -> None:
    host, port = bridge.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    body = json.dumps(INIT).encode()
    conn.putrequest("POST", "/mcp")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Accept", "application/json, text/event-stream")
    conn.putheader("Authorization", "Bearer t\u00f6k\u00e9n-\u2603".encode("utf-8"))  # raw non-ASCII bytes
    conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    assert conn.getresponse().status == 401


def test_4_key_in_query_string_is_401(bridge: Service) -> None:
    assert post(bridge, headers={"Authorization": None}, path=f"/mcp?api_key={TOKEN}").status_code == 401  # type: ignore[dict-item]


def test_5_the_engine_key_does_not_open_the_bridge(bridge: Service) -> None:
    assert post(bridge, headers={"Authorization": f"Bearer {ENGINE_KEY}"}).status_code == 401


@pytest.mark.parametrize(("origin", "status"), [("https://evil.example", 403), ("null", 403), (None, 200)])
def test_6_origin_is_checked(bridge: Service, origin: str | None, status: int) -> None:
    assert post(bridge, headers={"Origin": origin}).status_code == status  # type: ignore[dict-item]


def test_6_allow_listed_origin_is_accepted(bridge: Service) -> None:
    port = bridge.url.rsplit(":", 1)[1]
    assert post(bridge, headers={"Origin": f"http://localhost:{port}"}).status_code == 200


def test_7_host_not_allowed_is_421(bridge: Service) -> None:
    assert post(bridge, headers={"Host": "evil.example"}).status_code == 421


@pytest.mark.parametrize(("headers", "status"), [({"Host": "evil.example"}, 421), ({"Origin": "https://evil.example"}, 403)])
def test_6_and_7_the_guard_answers_before_auth(bridge: Service, headers: dict[str, str], status: int) -> None:
    """One guard in front of every path (tests/e2e/test_web_door.py), still before the token is looked at:
    a rebinding page learns nothing, not even that a token is needed."""
    response = post(bridge, headers={"Authorization": None, **headers})  # type: ignore[dict-item]
    assert response.status_code == status and "www-authenticate" not in response.headers


@pytest.mark.parametrize("version", ["1999-01-01", "garbage", "2025-11-25x", ""])
@pytest.mark.parametrize("payload", [INIT, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}], ids=["initialize", "tools/list"])
def test_8_unknown_protocol_version_header_is_400_naming_the_versions_served(bridge: Service, version: str,
                                                                              payload: dict[str, object]) -> None:
    """2025-11-25 asks for 400; the answer is its lifecycle's error for an unsupported version (-32602 with
    `supported` and `requested`). Before, the SDK's 2026-07-28 path answered "params._meta must be an object
    carrying ..." to a request that never claimed that revision."""
    response = post(bridge, payload=payload, headers={"MCP-Protocol-Version": version})
    assert response.status_code == 400
    reply = response.json()
    assert reply["id"] == payload["id"] and reply["error"]["code"] == -32602
    assert reply["error"]["message"].startswith("Unsupported protocol version")
    assert reply["error"]["data"] == {"requested": version, "supported": [
        "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]}


def test_8_a_2026_request_with_an_unknown_version_header_is_still_the_sdks_header_mismatch(bridge: Service) -> None:
    """Left to the SDK: 2026-07-28 specifies how a header that disagrees with the body's version is answered."""
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}
    response = post(bridge, payload=body, headers={"MCP-Protocol-Version": "1999-01-01", "Mcp-Method": "tools/list"})
    assert response.status_code == 400 and response.json()["error"]["code"] == -32020


def _raw_modern_call(bridge: Service, tool: str, name_header: bytes) -> tuple[int, dict[str, object]]:
    """A 2026-07-28 tools/call whose Mcp-Name header is sent byte for byte (requests refuses leading spaces)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}}}).encode()
    host, port = bridge.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.putrequest("POST", "/mcp")
        for key, value in [*HEADERS.items(), ("Authorization", f"Bearer {TOKEN}"), ("MCP-Protocol-Version", "2026-07-28"),
                           ("Mcp-Method", "tools/call"), ("Content-Length", str(len(body)))]:
            connection.putheader(key, value)
        connection.putheader("Mcp-Name", name_header)
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


@pytest.mark.parametrize("name_header", [b" kb_status", b"kb_status \t", b"\t kb_status  "])
def test_8_spaces_around_the_mcp_name_header_are_not_part_of_it(bridge: Service, name_header: bytes) -> None:
    """RFC 9110 section 5.5 (the 2026-07-28 conformance suite's http-header-validation): the call is served,
    not refused as a header mismatch; the engine is down here, so the tool itself reports that."""
    status, reply = _raw_modern_call(bridge, "kb_status", name_header)
    assert status == 200 and "error" not in reply, reply
    assert reply["result"]["isError"] is True  # type: ignore[index]


def test_8_an_mcp_name_header_naming_another_tool_is_still_refused(bridge: Service) -> None:
    status, reply = _raw_modern_call(bridge, "kb_status", b" kb_search ")
    assert status == 400 and reply["error"]["code"] == -32020  # type: ignore[index]


def assert_invalid_request(response: requests.Response, status: int, named: str, request_id: object = None) -> None:
    """`status` with a JSON-RPC error -32600 (with the request's id when it had a valid one, else null), whose
    short message names what is wrong."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    reply = response.json()
    assert reply["jsonrpc"] == "2.0" and reply["id"] == request_id
    assert reply["error"]["code"] == -32600 and named in reply["error"]["message"], reply


@pytest.mark.parametrize("content_type", ["text/plain", None, "application/x-www-form-urlencoded"])
def test_9_non_json_content_type_is_415_with_a_jsonrpc_error(bridge: Service, content_type: str | None) -> None:
    """Before: a plain-text 400 "Invalid Content-Type header" from the SDK."""
    assert_invalid_request(post(bridge, headers={"Content-Type": content_type}), 415, "application/json")  # type: ignore[dict-item]


@pytest.mark.parametrize("content_type", ["APPLICATION/JSON", "Application/Json; charset=UTF-8", "application/json ; charset=utf-8"])
def test_9_the_json_media_type_is_case_insensitive_and_takes_parameters(bridge: Service, content_type: str) -> None:
    """RFC 9110 section 8.3.1; before, APPLICATION/JSON was refused 415."""
    response = post(bridge, headers={"Content-Type": content_type})
    assert response.status_code == 200 and response.json()["result"]["protocolVersion"] == "2025-06-18"


def test_9_invalid_json_is_a_parse_error(bridge: Service) -> None:
    response = post(bridge, payload=b"{not json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700


def test_9_batch_is_rejected(bridge: Service) -> None:
    """Batches are not supported (docs/protocol.md, "The /mcp door"), and said so."""
    assert_invalid_request(post(bridge, payload=[INIT, INIT]), 400, "batches are not supported")


ADDNOTE = {"name": "kb_addnote", "arguments": {"text": "a note nobody may lose", "collection": "documents"}}


@pytest.mark.parametrize("request_id", [None, 1.5, True, {"a": 1}], ids=["null", "1.5", "true", "object"])
def test_9_a_request_whose_id_is_not_a_string_or_integer_is_invalid_not_dropped(bridge: Service, request_id: object) -> None:
    """MCP: a request id MUST be a string or an integer, not null. Before, the SDK took each of these for a
    notification: 202, an empty body, and the note never written, with nothing to tell the client."""
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": ADDNOTE}
    assert_invalid_request(post(bridge, payload=body, headers={"MCP-Protocol-Version": "2025-11-25"}), 400, "id must be")


@pytest.mark.parametrize(("body", "named"), [
    ({"id": 1, "method": "tools/call", "params": ADDNOTE}, 'jsonrpc must be "2.0"'),
    ({"jsonrpc": "2.0", "id": 1, "method": 5, "params": ADDNOTE}, "method must be a string"),
    ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ["a note nobody may lose"]}, "params must be an object"),
    ("5", "must be a JSON-RPC message object"),
], ids=["no jsonrpc", "method 5", "params array", "a number"])
def test_9_a_body_that_is_not_a_jsonrpc_message_is_invalid_request_without_echoing_it(bridge: Service, body: object, named: str) -> None:
    """Before: -32602 with pydantic's error dump, quoting the input and linking errors.pydantic.dev."""
    response = post(bridge, payload=body, headers={"MCP-Protocol-Version": "2025-11-25"})
    assert_invalid_request(response, 400, named, body.get("id") if isinstance(body, dict) else None)
    assert "nobody" not in response.text and "pydantic" not in response.text


def assert_jsonrpc_413(response: requests.Response) -> None:
    """413, and a JSON-RPC error body a client can read (not plain text)."""
    assert response.status_code == 413
    assert response.headers["content-type"].startswith("application/json")
    reply = response.json()
    assert reply["jsonrpc"] == "2.0" and reply["id"] is None
    assert reply["error"]["code"] == -32600 and "KB_MCP_MAX_BODY_BYTES" in reply["error"]["message"]


def test_10_oversized_body_is_413_with_content_length(bridge: Service) -> None:
    assert_jsonrpc_413(post(bridge, payload=b"x" * (4 * 1024 * 1024 + 1)))


def test_10_oversized_chunked_body_is_413(bridge: Service) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(5):
            yield b"x" * (1024 * 1024)

    response = requests.post(
        bridge.url + "/mcp", data=chunks(), timeout=10,
        headers={**HEADERS, "Authorization": f"Bearer {TOKEN}"},
    )
    assert "content-length" not in {k.lower() for k in response.request.headers}  # really chunked
    assert_jsonrpc_413(response)


def test_healthz_is_public_and_readyz_reports_the_engine_down(bridge: Service) -> None:
    assert requests.get(bridge.url + "/healthz", timeout=5).json()["ok"] is True
    ready = requests.get(bridge.url + "/readyz", timeout=10)
    assert ready.status_code == 503 and ready.json()["engine"]["reachable"] is False


@pytest.mark.anyio
@pytest.mark.parametrize("era", ["legacy", "auto"])
async def test_engine_unreachable_bridge_serves_and_tools_say_so(bridge: Service, era: str) -> None:
    async with connect(bridge.url, TOKEN, era) as client:
        assert {t.name for t in (await client.list_tools()).tools} >= {"kb_search", "kb_addnote"}
        result = await client.call_tool("kb_search", {"query": "anything"})
    assert result.is_error
    assert result.structured_content["error"]["code"] == "ENGINE_UNAVAILABLE"
    assert "127.0.0.1" not in result.content[0].text  # no URL, no key, no trace


@pytest.mark.anyio
async def test_logs_are_json_events_with_request_ids_and_no_content(bridge: Service) -> None:
    async with connect(bridge.url, TOKEN) as client:
        await client.call_tool("kb_addnote", {"text": "NOTE-BODY-7d1f must never be logged"})
    echoed = post(bridge, headers={"X-Request-Id": "trace-abc.123"})
    assert echoed.headers["x-request-id"] == "trace-abc.123"

    def events() -> list[dict[str, object]]:
        return [json.loads(line) for line in bridge.log_path.read_text().splitlines() if line.strip()]

    # One line per request, written once the answer has gone out: poll for it.
    wait_until(lambda: any(e.get("request_id") == "trace-abc.123" for e in events()), 10, what="the access line")
    tool_events = [e for e in events() if e.get("event") == "mcp_tool_error" and e.get("tool") == "kb_addnote"]
    assert tool_events, "the failed call should have logged its tool event"
    line = tool_events[-1]
    assert line["code"] == "ENGINE_UNAVAILABLE" and line["engine_status"] and line["request_id"]
    assert line["method"] == "POST" and line["path"] == "/mcp" and line["status"] == 200 and line["request_ms"] >= line["duration_ms"]
    assert [e for e in events() if e.get("request_id") == "trace-abc.123"][0]["event"] == "http_request"
    assert "NOTE-BODY-7d1f" not in bridge.log()


def test_4_no_log_line_contains_a_key(bridge: Service) -> None:
    log = bridge.log()
    assert "mcp_tool" in log  # the log did record the calls above
    assert TOKEN not in log and ENGINE_KEY not in log


def test_11_without_a_key_the_default_bind_is_loopback_and_a_warning_is_logged(tmp_path: Path) -> None:
    from kb_bridge.settings import load_settings

    assert load_settings({}).server.bind.startswith("127.0.0.1:")
    service = start_bridge(tmp_path, {"KB_ENGINE_URL": f"http://127.0.0.1:{free_port()}"}, workers=1)
    try:
        assert post(service, headers={"Authorization": None}).status_code == 200  # type: ignore[dict-item]
    finally:
        service.stop()
    assert "KB_MCP_API_KEY is not set" in service.log_path.read_text()


def test_1_and_5_refused_calls_never_reach_the_engine_which_only_sees_its_own_key(tmp_path: Path) -> None:
    from kb_bridge.testing.mcp_http import modern_call
    from kb_bridge.testing.standin import StandInEngine

    with StandInEngine() as engine:
        service = start_bridge(tmp_path, {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN, "KB_API_KEY": ENGINE_KEY}, workers=1)
        try:
            for token in (None, "wrong-token-0123456789", ENGINE_KEY):
                with pytest.raises(requests.HTTPError) as refused:
                    modern_call(service.url, token, "kb_search", {"query": "x"})
                assert refused.value.response.status_code == 401
            assert engine.received == []  # nothing refused at the door reached the engine
            modern_call(service.url, TOKEN, "kb_search", {"query": "x"})
        finally:
            service.stop()
    assert engine.received and set(engine.authorizations) == {f"Bearer {ENGINE_KEY}"}


def test_8_a_2025_11_25_task_augmented_call_to_a_tool_without_task_support_is_method_not_found(bridge: Service) -> None:
    """2025-11-25, tasks, tool-level negotiation: a tool without `execution.taskSupport` is not called as a task
    (the server SHOULD answer -32601). Before, kb_status ran and its CallToolResult came back to a client waiting
    for a CreateTaskResult."""
    body = {"jsonrpc": "2.0", "id": 11, "method": "tools/call",
            "params": {"name": "kb_status", "arguments": {}, "task": {"ttl": 60000}}}
    response = post(bridge, payload=body, headers={"MCP-Protocol-Version": "2025-11-25"})
    reply = response.json()
    assert reply["id"] == 11 and reply["error"]["code"] == -32601 and "kb_status" in reply["error"]["message"], reply


@pytest.mark.parametrize(("arguments", "code", "tool_code"), [
    ({"text": "", "collection": "memory"}, -32602, "VALIDATION_ERROR"),
    ({"text": "a note", "collection": "memory"}, -32603, "ENGINE_UNAVAILABLE"),  # nothing listens at the engine's URL
])
def test_8_a_2025_11_25_task_augmented_call_that_fails_before_any_job_is_a_jsonrpc_error_carrying_the_tools(
    bridge: Service, arguments: dict[str, object], code: int, tool_code: str,
) -> None:
    """The requestor asked for a task and reads a CreateTaskResult; a CallToolResult made the TypeScript SDK client
    throw a schema error (`expected object` at `task`) that lost the tool's message."""
    body = {"jsonrpc": "2.0", "id": 12, "method": "tools/call",
            "params": {"name": "kb_addnote", "arguments": arguments, "task": {"ttl": 60000}}}
    reply = post(bridge, payload=body, headers={"MCP-Protocol-Version": "2025-11-25"}).json()
    assert reply["id"] == 12 and reply["error"]["code"] == code, reply
    assert reply["error"]["data"]["code"] == tool_code and reply["error"]["message"].startswith(tool_code)
