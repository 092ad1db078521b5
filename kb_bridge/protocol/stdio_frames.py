"""One line of stdin as a JSON-RPC message, or the error that answers it.

The line is checked as the HTTP door checks a body (protocol/envelope.py), so both transports refuse the same
messages in the same words: -32700 (Parse error) for bytes that are not UTF-8 JSON, -32600 (Invalid Request)
for JSON that is not one JSON-RPC message, or a request whose id MCP does not allow (null, 1.5, true, an
object: read as a notification, it would run and answer nothing). Over stdio there is no status code, so the
error answer is all a client gets; it carries the request's id when it has a valid one.
"""

from __future__ import annotations

from dataclasses import dataclass

import mcp_types as types
from mcp_types import INVALID_REQUEST, ErrorData, JSONRPCError, JSONRPCMessage, RequestId
from pydantic import ValidationError

from kb_bridge.protocol import envelope


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
    checked = envelope.read(line)
    if isinstance(checked, envelope.Refusal):
        if checked.of_response:
            return Ignored(f"a malformed response from the client ({checked.message})")
        return _refuse(checked.code, checked.message, checked.id)
    try:
        return types.jsonrpc_message_adapter.validate_python(checked, by_name=False)
    except ValidationError as exc:  # what envelope.py lets through the SDK reads (tests/test_envelope.py)
        fields = ", ".join(sorted({str(error["loc"][0]) for error in exc.errors() if error["loc"]}))
        request_id = checked.get("id") if "method" in checked else None
        return _refuse(INVALID_REQUEST, f"Invalid Request: {fields or 'a field'} missing or of the wrong kind",
                       request_id if isinstance(request_id, (str, int)) else None)


def _refuse(code: int, message: str, request_id: RequestId | None) -> Refused:
    answer = JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))
    return Refused(answer, message)
