"""The Flask app served to the ASGI server: each request runs on a bounded thread pool of its own, and talks
to the event loop with plain asyncio (a2wsgi's WSGIMiddleware).

Why not asgiref's WsgiToAsgi (used before, issue 32 item 8): it runs every WSGI call through asgiref's
thread-sensitive `sync_to_async` and calls `send` through `AsyncToSync`, which records the calling thread's
`CurrentThreadExecutor` in asgiref's context-local `AsyncToSync.executors` and runs `send` in a task that
carries that context. It sends the body with `more_body` and then an empty last message; a kept-alive client
that already has the whole answer (its Content-Length) sends its next request in between, and uvicorn starts
that request from inside the last `send`, so in that task's context. The new request's `sync_to_async` then
finds the previous request's executor, which has quit by then: 500 "CurrentThreadExecutor already quit or
is broken" (asgiref 3.8 hung instead, waiting on it). It also ran every Flask request of a process on one
shared thread, and spooled each request body whole to a temporary file before Flask saw it.

Here the request's body is streamed to Flask as Flask reads it (the body limit in front, body_limit.py,
counts it), the pool is bounded, and no asgiref state is involved.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from a2wsgi import WSGIMiddleware
from a2wsgi.wsgi_typing import WSGIApp
from flask import Flask

from kb_bridge.asgi_messages import ASGIApp


def serve_wsgi(app: Flask, threads: int) -> ASGIApp:
    """`app` as an ASGI app, at most `threads` of its requests running at once per process (the rest wait
    for a thread, on the event loop)."""

    def terminated(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        # The ASGI server de-chunks the body and says where it ends, so the stream is terminated: without
        # this werkzeug reads nothing of a body sent without Content-Length (chunked), and with it werkzeug
        # also holds such a body to MAX_CONTENT_LENGTH.
        environ["wsgi.input_terminated"] = True
        return app(environ, start_response)

    # a2wsgi types the WSGI environ and the ASGI messages as TypedDicts; ours are the plain mappings they are.
    return cast(ASGIApp, WSGIMiddleware(cast(WSGIApp, terminated), workers=threads))
