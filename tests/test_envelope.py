"""The JSON-RPC envelope check in front of the SDK (protocol/envelope.py): what it refuses, in what words,
and that what it lets through is read by the SDK as the same kind of message (a request stays a request,
never a notification dropped with 202). The real door: tests/e2e/test_http_door.py."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import mcp_types as types
import pytest
from pydantic import ValidationError

from kb_bridge import json_values
from kb_bridge.protocol import envelope

CALL = {"name": "kb_addnote", "arguments": {"text": "a secret note", "collection": "documents"}}

REFUSED_REQUESTS: list[tuple[str, Any, str]] = [
    ("id null", {"jsonrpc": "2.0", "id": None, "method": "tools/call", "params": CALL}, "id must be"),
    ("id 1.5", {"jsonrpc": "2.0", "id": 1.5, "method": "tools/call", "params": CALL}, "id must be"),
    ("id 1.0", {"jsonrpc": "2.0", "id": 1.0, "method": "ping"}, "id must be"),
    ("id true", {"jsonrpc": "2.0", "id": True, "method": "tools/call", "params": CALL}, "id must be"),
    ("id object", {"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/call", "params": CALL}, "id must be"),
    ("id array", {"jsonrpc": "2.0", "id": [1], "method": "ping"}, "id must be"),
    ("no jsonrpc", {"id": 1, "method": "ping"}, 'jsonrpc must be "2.0"'),
    ("jsonrpc 1.0", {"jsonrpc": "1.0", "id": 1, "method": "ping"}, 'jsonrpc must be "2.0"'),
    ("jsonrpc 2", {"jsonrpc": 2, "id": 1, "method": "ping"}, 'jsonrpc must be "2.0"'),
    ("method 5", {"jsonrpc": "2.0", "id": 1, "method": 5}, "method must be a string"),
    ("params array", {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1, 2]}, "params must be an object"),
    ("params string", {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": "a secret note"}, "params must be an object"),
    ("notification params array", {"jsonrpc": "2.0", "method": "notifications/initialized", "params": [1]}, "params must be an object"),
    ("neither", {"jsonrpc": "2.0", "id": 1}, "needs a method"),
    ("result and error", {"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "x"}}, "needs a method"),
    ("result without id", {"jsonrpc": "2.0", "result": {}}, "id must be"),
    ("result id null", {"jsonrpc": "2.0", "id": None, "result": {}}, "id must be"),
    ("result array", {"jsonrpc": "2.0", "id": 1, "result": [1]}, "result must be an object"),
    ("error id float", {"jsonrpc": "2.0", "id": 1.5, "error": {"code": 1, "message": "x"}}, "id must be"),
    ("error not an object", {"jsonrpc": "2.0", "id": 1, "error": "x"}, "error must be an object"),
    ("error code string", {"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "x"}}, "error must be an object"),
    ("number", 5, "must be a JSON-RPC message object"),
    ("string", "a secret note", "must be a JSON-RPC message object"),
    ("null", None, "must be a JSON-RPC message object"),
    ("batch", [{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": 2, "method": "ping"}], "batches are not supported"),
    ("empty batch", [], "batches are not supported"),
]

ACCEPTED: list[tuple[str, Any]] = [
    ("id integer", {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": CALL}),
    ("id negative", {"jsonrpc": "2.0", "id": -5, "method": "ping"}),
    ("id large", {"jsonrpc": "2.0", "id": 10**30, "method": "ping"}),
    ("id string", {"jsonrpc": "2.0", "id": "abc", "method": "ping"}),
    ("id empty string", {"jsonrpc": "2.0", "id": "", "method": "ping"}),
    ("params null", {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": None}),
    ("no params", {"jsonrpc": "2.0", "id": 1, "method": "ping"}),
    ("extra member", {"jsonrpc": "2.0", "id": 1, "method": "ping", "x": 1}),
    ("notification", {"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ("response", {"jsonrpc": "2.0", "id": 7, "result": {}}),
    ("error response", {"jsonrpc": "2.0", "id": 7, "error": {"code": 1, "message": "x"}}),
    ("error response id null", {"jsonrpc": "2.0", "id": None, "error": {"code": 1, "message": "x"}}),
]


@pytest.mark.parametrize(("label", "value", "named"), REFUSED_REQUESTS, ids=[c[0] for c in REFUSED_REQUESTS])
def test_a_message_that_is_not_one_jsonrpc_message_is_invalid_request_naming_why(label: str, value: Any, named: str) -> None:
    refusal = envelope.read(json.dumps(value).encode())
    assert isinstance(refusal, envelope.Refusal)
    # A request with a valid id is answered with it (a stdio client matches answers by id alone); else null.
    valid_id = isinstance(value, dict) and "method" in value and type(value.get("id")) in (int, str)
    assert (refusal.status, refusal.code, refusal.id) == (400, types.INVALID_REQUEST, value["id"] if valid_id else None)
    assert refusal.message.startswith("Invalid Request: ") and named in refusal.message
    # Short, and never the input: no pydantic dump, no quoted body.
    assert len(refusal.message) < 120 and "secret" not in refusal.message and "pydantic" not in refusal.message


@pytest.mark.parametrize(("label", "value"), ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_what_passes_the_sdk_reads_as_the_same_kind_of_message(label: str, value: Any) -> None:
    """Before: the SDK took a request with a bad id for a notification (202, never run). Now a message that
    has an id and a method passes only if the SDK reads it as a request, and the SDK refuses nothing that
    passes (its refusal quotes the input)."""
    message = envelope.read(json.dumps(value).encode())
    assert message == value
    parsed = types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    if "method" in value:
        expected: type = types.JSONRPCRequest if "id" in value else types.JSONRPCNotification
    else:
        expected = types.JSONRPCResponse if "result" in value else types.JSONRPCError
    assert isinstance(parsed, expected)


@pytest.mark.parametrize(("label", "value", "named"), REFUSED_REQUESTS, ids=[c[0] for c in REFUSED_REQUESTS])
def test_what_is_refused_the_sdk_would_have_dropped_or_refused(label: str, value: Any, named: str) -> None:
    """No refusal here is of a request the SDK would have served: each is one it refuses, one it reads as a
    notification although it has an id, or a response (which it drops)."""
    try:
        parsed = types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ValidationError:
        return
    assert not isinstance(parsed, types.JSONRPCRequest), label


@pytest.mark.parametrize("body", [b"{not json", b"", b'{"jsonrpc": "2.0", "id": 1, "method": "ping"', b"\xff\xfe{}",
                                  b'{"id": ' + b"9" * 5000 + b"}", b"[" * 100_000 + b"]" * 100_000])
def test_a_body_that_is_not_json_is_a_parse_error_quoting_nothing(body: bytes) -> None:
    refusal = envelope.read(body)
    assert isinstance(refusal, envelope.Refusal)
    assert (refusal.status, refusal.code, refusal.id) == (400, types.PARSE_ERROR, None)
    assert refusal.message.startswith("Parse error") and "not json" not in refusal.message and "9999" not in refusal.message


@pytest.mark.parametrize(("value", "json"), [
    (b"application/json", True), (b"APPLICATION/JSON", True), (b"Application/Json; charset=UTF-8", True),
    (b"application/json ;charset=utf-8", True), (b"application/json\t", True),
    (None, False), (b"", False), (b"text/plain", False), (b"application/x-www-form-urlencoded", False),
    (b"application/jsonx", False), (b"application/json-seq", False), (b"text/json", False),
])
def test_json_content_types_compare_case_insensitively_with_parameters(value: bytes | None, json: bool) -> None:
    assert envelope.is_json(value) is json


def test_a_message_of_more_json_values_than_any_call_holds_is_refused_before_it_is_parsed() -> None:
    """1.3 million empty arrays in an argument (3.7 MiB, inside KB_MCP_MAX_BODY_BYTES) were parsed by the
    door and again by the SDK, 200 MiB between them, before the schema refused the argument."""
    def call(arguments: str) -> bytes:
        return ('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "kb_search", "arguments": '
                + arguments + "}}").encode()
    refused = envelope.read(call('{"query": "x", "x": [' + ",".join(["[]"] * 1_300_000) + "]}"))
    assert isinstance(refused, envelope.Refusal)
    assert (refused.status, refused.code) == (400, types.INVALID_REQUEST)
    assert f"at most {envelope.MAX_JSON_VALUES} JSON values" in refused.message
    # Brackets and commas inside strings are text, not values: the largest note passes, whatever it says.
    note = json.dumps({"text": '[,{"\\' * 250_000, "tags": ["a"] * 20})
    assert isinstance(envelope.read(call(note)), dict)
    body = call(note)
    tracemalloc.start()
    try:
        assert not json_values.more_than(body, envelope.MAX_JSON_VALUES)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100_000, peak  # counting keeps no state per escape or value
    assert isinstance(envelope.read(call('{"x": [' + ",".join(["0"] * (envelope.MAX_JSON_VALUES - 10)) + "]}")), dict)
