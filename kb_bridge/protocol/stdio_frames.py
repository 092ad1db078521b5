"""One line of stdin as a JSON-RPC message, or the error that answers it.

JSON-RPC 2.0 answers what is not a request: -32700 (Parse error) for bytes that are not JSON, and -32600
(Invalid Request) for JSON that is not a request object, both with id null since none could be read, or with the
request's id when it has a valid one. MCP allows a request id to be a string or an integer only; a request with
any other id (null, 1.5, true, an object) is refused rather than read as a notification, which would run it and
answer nothing. The HTTP transport refuses the same lines; over stdio there is no status code, so the error
answer is all a client gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pydantic_core
from mcp_types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
)
from pydantic import ValidationError


@dataclass(frozen=True)
class Refused:
    """A line that is not a message: `answer` goes back to the client, `reason` to the log."""

    answer: JSONRPCError
    reason: str


@dataclass(frozen=True)
class Ignored:
    """A line that gets no answer: a malformed response (answering a response could start an endless
    exchange of errors between the two peers)."""

    reason: str


def read_frame(line: bytes) -> JSONRPCMessage | Refused | Ignored | None:
    """The message `line` carries; `Refused` or `Ignored` when it is not one; None for a blank line, which
    separates nothing and asks nothing."""
    if not line.strip():
        return None
    try:
        # Strict: bytes that are not UTF-8 are a parse error, never U+FFFD in a stored note.
        data = pydantic_core.from_json(line)
    except ValueError as exc:
        return _refuse(PARSE_ERROR, f"Parse error: {exc}", None)
    if not isinstance(data, dict):
        # Batches are gone from MCP (2025-06-18) and this server never took them.
        return _refuse(INVALID_REQUEST, "Invalid Request: a message is one JSON object", None)
    request_id = data.get("id")
    usable_id = request_id if is_request_id(request_id) else None
    if "method" in data:
        if "id" not in data:
            return _validated(JSONRPCNotification, data, None)
        if usable_id is None:
            return _refuse(INVALID_REQUEST, "Invalid Request: a request id is a string or an integer", None)
        return _validated(JSONRPCRequest, data, usable_id)
    if "result" in data or "error" in data:
        model: type[JSONRPCResponse | JSONRPCError] = JSONRPCResponse if "result" in data else JSONRPCError
        try:
            return model.model_validate(data)
        except ValidationError:
            return Ignored("a malformed response from the client")
    return _refuse(INVALID_REQUEST, "Invalid Request: neither a request nor a response", usable_id)


def is_request_id(value: Any) -> bool:
    # bool is an int to Python, not to JSON.
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _validated(model: type[JSONRPCRequest | JSONRPCNotification], data: dict[str, Any],
               request_id: RequestId | None) -> JSONRPCMessage | Refused:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        fields = ", ".join(sorted({str(error["loc"][0]) for error in exc.errors() if error["loc"]}))
        return _refuse(INVALID_REQUEST, f"Invalid Request: {fields or 'a field'} missing or of the wrong kind",
                       request_id)


def _refuse(code: int, message: str, request_id: RequestId | None) -> Refused:
    answer = JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))
    return Refused(answer, message)

