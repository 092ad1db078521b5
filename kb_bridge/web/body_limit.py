"""Request body limits for every path Flask serves, enforced before the body is read (issue 32, item 7).

Each path has its own limit (`BodyLimits.for_path`): the operational endpoints and anything unknown take no
body at all; the console's forms take a form's worth, and the two that carry a note's text (saving a note, a
new note) the largest note; the console's upload takes an upload. In front of the WSGI adapter (web/wsgi.py), `BodyLimit`:

- answers a declared Content-Length over the limit 413 at once, without reading any of the body;
- lets a path the app does not route (`/MCP`, `//mcp`, `/no-such-page`) be answered by the app's 404, its
  body unread, rather than 413: "payload too large" would send a client that mistyped the endpoint after
  the wrong problem;
- on a path that takes no body, answers a chunked body 413 at once too;
- counts a chunked body as the app reads it, and at the limit answers 413 itself (the app reading it gets
  `BodyTooLarge`, which Flask turns into a quiet 413 of its own, never sent);
- marks an answer that begins before the request's body has ended `Connection: close`, so the server
  closes the connection instead of reading (and discarding) the rest of an unread body.

A 413 always closes the connection for the same reason. Nothing here buffers a body: it passes through,
counted.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from flask import Flask
from werkzeug.exceptions import HTTPException, NotFound, RequestEntityTooLarge

from kb_bridge.asgi_messages import ASGIApp, Receive, Scope, Send, header, send_json
from kb_bridge.settings import Settings
from kb_bridge.tools.arguments import NOTE_TEXT
from kb_bridge.web import console

MIB = 1024 * 1024
# The console's small forms (sign-in with a token, a JWT included; sign-out; delete): far below this.
FORM_BYTES = MIB
# A note's text as a form field at its largest: every character 4 bytes of UTF-8, each byte percent-encoded
# to 3, so 12 bytes a character; plus the form's other fields.
NOTE_FORM_BYTES = 12 * cast(int, NOTE_TEXT["maxLength"]) + FORM_BYTES
# An upload's multipart envelope around the file: boundaries, part headers, the collection and CSRF fields.
MULTIPART_ENVELOPE_BYTES = MIB

# The forms that carry a note's text: saving an existing note, and writing a new one.
_NOTE_FORMS = re.compile(r"/ui/documents/\d+|/ui/notes/new")
_CLOSE = (b"connection", b"close")


def upload_form_bytes(settings: Settings) -> int:
    """The largest console upload request: the largest file plus its multipart envelope."""
    return settings.uploads.max_bytes + MULTIPART_ENVELOPE_BYTES


@dataclass(frozen=True)
class BodyLimits:
    upload: int

    @classmethod
    def for_settings(cls, settings: Settings) -> BodyLimits:
        return cls(upload=upload_form_bytes(settings))

    @property
    def largest(self) -> int:
        """The largest body any path takes (Flask's own MAX_CONTENT_LENGTH, behind the door)."""
        return max(self.upload, NOTE_FORM_BYTES)

    def for_path(self, path: str) -> int:
        """The largest body `path` takes, in bytes (0: none)."""
        if path == "/ui/upload":
            return self.upload
        if _NOTE_FORMS.fullmatch(path):
            return NOTE_FORM_BYTES
        if console.serves(path):
            return FORM_BYTES
        return 0  # /healthz, /readyz, /metrics, the OAuth metadata, and every path that does not exist


def routed_by(app: Flask) -> Callable[[str], bool]:
    """Whether `app` has a view for a path, by any method (a path it redirects, /ui to /ui/, counts)."""

    def routed(path: str) -> bool:
        try:
            app.url_map.bind("localhost").match(path)
        except NotFound:
            return False
        except HTTPException:  # a method the path does not take, or a redirect: the path is there
            return True
        return True

    return routed


class BodyTooLarge(RequestEntityTooLarge):
    """Raised to the app reading a body past its path's limit (already answered 413)."""


class BodyLimit:
    def __init__(self, app: ASGIApp, limits: BodyLimits, routed: Callable[[str], bool]) -> None:
        self._app = app
        self._limits = limits
        self._routed = routed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        limit = self._limits.for_path(path)
        declared = header(scope, b"content-length")
        if declared is not None and declared.strip().isdigit():
            length = int(declared)
        elif header(scope, b"transfer-encoding") is not None:
            length = -1  # chunked: unknown, counted as it comes
        else:
            length = 0  # no body (the server rejects a Content-Length that is not a number)
        if length == 0:
            await self._app(scope, receive, send)
            return
        over = length > limit or (length == -1 and limit == 0)
        if over and self._routed(path):
            await _refuse(send, limit)
            return
        # Within the limit, or a path without a view, which the app answers 404 without reading the body
        # (counted all the same, should anything read it).
        await _Exchange(limit, receive, send).run(self._app, scope)


class _Exchange:
    """One request with a body: counts it as the app reads it and watches the answer begin."""

    def __init__(self, limit: int, receive: Receive, send: Send) -> None:
        self._limit = limit
        self._receive = receive
        self._send = send
        self._received = 0
        self._body_ended = False
        self._started = False
        self._refused = False

    async def run(self, app: ASGIApp, scope: Scope) -> None:
        await app(scope, self.receive, self.send)

    async def receive(self) -> dict[str, Any]:
        if self._refused:
            raise BodyTooLarge()
        message = await self._receive()
        if message["type"] != "http.request":
            return message
        self._received += len(message.get("body", b""))
        if self._received > self._limit:
            self._refused = True
            if not self._started:
                self._started = True
                await _refuse(self._send, self._limit)
            raise BodyTooLarge()
        if not message.get("more_body", False):
            self._body_ended = True
        return message

    async def send(self, message: dict[str, Any]) -> None:
        if self._refused:
            return  # answered 413 already (or the answer under way is cut off with the connection)
        if message["type"] == "http.response.start":
            self._started = True
            if not self._body_ended:
                message = {**message, "headers": [*message.get("headers", []), _CLOSE]}
        await self._send(message)


async def _refuse(send: Send, limit: int) -> None:
    what = "this path takes no request body" if limit == 0 else f"the request body is larger than this path takes ({limit} bytes)"
    await send_json(send, 413, {"error": "payload_too_large", "error_description": what}, [_CLOSE])
