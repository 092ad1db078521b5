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


class BridgeUvicornWorker(UvicornWorker):
    CONFIG_KWARGS: dict[str, Any] = {
        "loop": "auto",
        "http": "auto",
        # Fail the worker's boot if the app cannot start (lifespan), rather than serve broken.
        "lifespan": "on",
        # The app writes one access line per request itself (with its request id).
        "access_log": False,
        "server_header": False,
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # uvicorn_worker ignores gunicorn's worker_connections; uvicorn's own bound is
        # limit_concurrency (open connections or running requests, then 503 to new requests).
        self.config.limit_concurrency = self.cfg.worker_connections
