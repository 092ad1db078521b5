"""The JSON-RPC envelope of an MCP POST, checked before the SDK sees it (protocol/app.py McpEndpoint).

The SDK (mcp 2.3, handshake era) validates a body against the union of request, notification and the two
responses. A request whose id is not a string or an integer (null, 1.5, true, an object) fails the request
model and passes the notification one, which ignores the unknown `id`: it is answered 202 and never run, so a
`kb_addnote` is silently dropped. A body no model fits is answered -32602 with pydantic's error text, the
input quoted in it. Here the body is parsed once and each rule is checked by name: not JSON is -32700; a
JSON value that is not one JSON-RPC 2.0 message, or a request whose id MCP does not allow ("Requests MUST
include a string or integer ID", and "the ID MUST NOT be null": MCP basic protocol), is -32600 Invalid
Request, HTTP 400, with the request's id when it has a valid one and null otherwise, its message naming what
is wrong and never quoting the body. What passes is a
message the SDK reads as the same kind (tests/test_envelope.py holds the two to each other).

Batches (a JSON array) are refused: protocol 2025-03-26 has them and 2025-06-18 removed them; the SDK takes
one message per POST, and no MCP client of a later revision sends them (docs/protocol.md, "The /mcp door").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from kb_bridge import json_values

JSON = "application/json"

# The JSON values (arrays, objects and their members) one message may hold. A tool call's arguments are a few
# dozen (a note is one string, however long), and the door and the SDK each parse the body (json_values.py).
MAX_JSON_VALUES = 100_000


@dataclass(frozen=True)
class Refusal:
    """A POST answered at the door: HTTP `status` with a JSON-RPC error (`id` null unless known)."""

    status: int
    code: int
    message: str
    id: str | int | None = None
    data: Any = None
    of_response: bool = False  # the message was a response (stdio drops it: answering one could loop)

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return {"jsonrpc": "2.0", "id": self.id, "error": error}


UNSUPPORTED_MEDIA_TYPE = Refusal(415, types.INVALID_REQUEST, f"Content-Type must be {JSON}")


def is_json(content_type: bytes | None) -> bool:
    """Whether a Content-Type names JSON: the type and subtype compare case-insensitively and parameters
    (`; charset=utf-8`) are allowed (RFC 9110 section 8.3.1); the SDK compares `application/json` exactly."""
    if content_type is None:
        return False
    return content_type.split(b";", 1)[0].strip(b" \t").lower() == JSON.encode()


def read(body: bytes) -> dict[str, Any] | Refusal:
    """The one JSON-RPC message of `body`, or why it is refused."""
    if json_values.more_than(body, MAX_JSON_VALUES):
        return Refusal(400, types.INVALID_REQUEST, f"Invalid Request: a message may hold at most {MAX_JSON_VALUES} "
                       "JSON values (arrays, objects and their members)")
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        # Where, never what: the message quotes no part of the body.
        return Refusal(400, types.PARSE_ERROR, f"Parse error: {exc.msg} at line {exc.lineno} column {exc.colno}")
    except (ValueError, RecursionError):
        # Bytes that are not UTF-8, an integer of more than 4300 digits, nesting deeper than Python parses.
        return Refusal(400, types.PARSE_ERROR, "Parse error: the body is not JSON")
    problem = _problem(data)
    if problem is not None:
        return Refusal(400, types.INVALID_REQUEST, f"Invalid Request: {problem}", id=_request_id(data),
                       of_response=isinstance(data, dict) and "method" not in data and ("result" in data or "error" in data))
    return data  # an object: _problem checked it


def unsupported_version(header: bytes | None, message: dict[str, Any]) -> Refusal | None:
    """400 naming the versions served, for a request of the handshake era's shape (no per-request protocol
    version in its `_meta`) whose MCP-Protocol-Version header names none of them.

    The SDK sends every header value it does not know to its 2026-07-28 path, which asks such a request for
    the `_meta` envelope keys: -32602 "params._meta must be an object carrying ...", which names neither the
    header nor a version. 2025-11-25 (transports) asks for 400 only; its error for a version not supported
    (basic/lifecycle) is -32602 "Unsupported protocol version" with `supported` and `requested`, as here. A
    request carrying 2026-07-28's `_meta` version is left to the SDK, whose checks of header against body
    that revision specifies (-32020, -32022)."""
    if header is None or "id" not in message:
        return None
    requested = header.decode("latin-1")
    if requested in HANDSHAKE_PROTOCOL_VERSIONS or requested in MODERN_PROTOCOL_VERSIONS:
        return None
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if isinstance(meta, dict) and types.PROTOCOL_VERSION_META_KEY in meta:
        return None
    supported = [*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS]
    return Refusal(400, types.INVALID_PARAMS, "Unsupported protocol version (the MCP-Protocol-Version header)",
                   id=message["id"], data={"supported": supported, "requested": requested[:100]})


def _problem(data: Any) -> str | None:
    if isinstance(data, list):
        return "batches are not supported; send one JSON-RPC message per request"
    if not isinstance(data, dict):
        return "the body must be a JSON-RPC message object"
    if data.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if "method" in data:
        if not isinstance(data["method"], str):
            return "method must be a string"
        if "id" in data and not _is_id(data["id"]):
            return "id must be a string or an integer (a request), or left out (a notification)"
        if data.get("params") is not None and not isinstance(data["params"], dict):
            return "params must be an object"
        return None
    # A response: the SDK accepts and drops one (this stateless server sends no requests to answer).
    if ("result" in data) == ("error" in data):
        return "a message needs a method (a request or notification), or a result or an error (a response)"
    if "result" in data:
        if not _is_id(data.get("id")):
            return "id must be a string or an integer"
        return None if isinstance(data["result"], dict) else "result must be an object"
    if data.get("id") is not None and not _is_id(data["id"]):
        return "id must be a string, an integer or null"
    error = data["error"]
    if not (isinstance(error, dict) and _is_int(error.get("code")) and isinstance(error.get("message"), str)):
        return "error must be an object with an integer code and a string message"
    return None


def _request_id(data: Any) -> str | int | None:
    """The id to answer a refused request with: its own when it has a valid one (a stdio client matches answers
    by id alone, and would wait for ever on one answered null), else null as JSON-RPC 2.0 asks."""
    if isinstance(data, dict) and "method" in data and _is_id(data.get("id")):
        return data["id"]
    return None


def _is_id(value: Any) -> bool:
    return isinstance(value, str) or _is_int(value)


def _is_int(value: Any) -> bool:
    # bool is an int to Python, not to JSON; 1.0 and 1e400 are numbers JSON-RPC does not call integers here
    # (the SDK's id is a strict int), and json.loads reads NaN and Infinity as floats too.
    return isinstance(value, int) and not isinstance(value, bool)

