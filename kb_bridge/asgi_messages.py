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


async def send_json(send: Send, status: int, body: Any, extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
