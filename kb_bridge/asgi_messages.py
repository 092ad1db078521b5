"""Reading and answering raw ASGI HTTP messages, for the middleware in front of /mcp."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def header(scope: Mapping[str, Any], name: bytes) -> bytes | None:
    """The first value of a (lower-case) request header, or None."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


def trimmed_headers(scope: Scope) -> Scope:
    """The scope with each header value's leading and trailing spaces and tabs removed: RFC 9110 section 5.5
    says they are not part of the value, and the HTTP parser under uvicorn keeps trailing ones, so an
    `Mcp-Name: kb_search ` header would not match its body's name (the MCP SDK compares them as given)."""
    return {**scope, "headers": [(key, bytes(value).strip(b" \t")) for key, value in scope.get("headers", ())]}


def with_header(scope: Scope, name: bytes, value: bytes) -> Scope:
    """The scope with every `name` header replaced by one `name: value`."""
    return {**scope, "headers": [*((k, v) for k, v in scope.get("headers", ()) if k != name), (name, value)]}


async def send_json(send: Send, status: int, body: Any, extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
