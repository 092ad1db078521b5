"""The gunicorn worker kb-bridge runs in by default: uvicorn's, tuned for the bridge.

Why not gunicorn's native ASGI worker (still available: KB_WORKER_CLASS=asgi)? Measured side by
side (bench/overhead.py), uvicorn's C HTTP parser (httptools) and event loop (uvloop) answer a
tool call about 0.1 ms sooner, which is what separates kb-bridge from the SDK's own MCPServer
under uvicorn; and on SIGTERM uvicorn closes idle keep-alive connections at once instead of
waiting for them, so a graceful shutdown takes as long as the calls in flight, no longer.
"""

from __future__ import annotations

from typing import Any

from uvicorn_worker import UvicornWorker

from kb_bridge.serving.protocol import BoundedHttpToolsProtocol
from kb_bridge.settings import load_settings


class BridgeUvicornWorker(UvicornWorker):
    CONFIG_KWARGS: dict[str, Any] = {
        "loop": "auto",
        # uvicorn's httptools protocol with bounds on slow clients (serving/protocol.py).
        "http": BoundedHttpToolsProtocol,
        # Fail the worker's boot if the app cannot start (lifespan), rather than serve broken.
        "lifespan": "on",
        # The app writes one access line per request itself (with its request id).
        "access_log": False,
        "server_header": False,
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        server = load_settings().server
        limits = BoundedHttpToolsProtocol.limits
        limits.header_timeout, limits.body_timeout = server.header_timeout, server.body_timeout
        limits.max_connections = server.max_connections
        # uvicorn_worker ignores gunicorn's worker_connections. The protocol keeps at most max_connections
        # open by closing idle ones; uvicorn's own bound (open connections or running requests, then 503)
        # sits one above, so it answers 503 only when every connection has a request in progress.
        self.config.limit_concurrency = server.max_connections + 1
