"""Serving the engine with gunicorn: one process, one gthread worker, N request threads.

One worker process, not several: the engine keeps its vector matrix in memory and runs its job queue
in a thread, and both must exist exactly once per database. gunicorn (already a kb-bridge dependency)
still earns its place over a bare threaded server: a robust HTTP parser, keep-alive, request-size and
header limits, a master that restarts the worker if it dies, and clean SIGTERM (graceful) / SIGINT (fast)
handling. `preload_app` stays off so the app -- and with it the ingestion thread and the model -- is
built inside the worker process, never in the master (threads do not survive fork).
"""

from __future__ import annotations

import logging
from typing import Any

import flask
from gunicorn.app.base import BaseApplication

from kb_bridge.logs import gunicorn_logconfig

from .app import create_app, engine_of
from .config import EngineConfig

logger = logging.getLogger(__name__)

# Generous: with background model loading the worker boots in a second, but --wait-for-model loads the
# model (and a large database loads its vectors) before the worker's first heartbeat.
WORKER_BOOT_TIMEOUT_SECONDS = 300
GRACEFUL_TIMEOUT_SECONDS = 30


class EngineServer(BaseApplication):
    def __init__(self, config: EngineConfig, log_level: str = "info") -> None:
        self._engine_config = config
        self._log_level = log_level
        super().__init__()

    def load_config(self) -> None:
        config = self._engine_config
        settings: dict[str, Any] = {
            "bind": [config.bind],
            "workers": 1,
            "worker_class": "gthread",
            "threads": config.threads,
            "timeout": WORKER_BOOT_TIMEOUT_SECONDS,
            "graceful_timeout": GRACEFUL_TIMEOUT_SECONDS,
            "keepalive": 5,
            "accesslog": "-" if config.access_log else None,
            "errorlog": "-",
            "loglevel": self._log_level,
            "logconfig_dict": gunicorn_logconfig(self._log_level.upper(), config.log_json, access_log=config.access_log),
            "proc_name": "kb-engine",
            "control_socket_disable": True,
            "post_worker_init": _announce_ready,
            "worker_exit": _close_engine,
        }
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> flask.Flask:
        return create_app(self._engine_config)


def _announce_ready(worker: Any) -> None:
    app = worker.wsgi
    engine = engine_of(app)
    state = engine.embedders.state
    vectors = {"ready": "vector and hybrid search ready", "loading": "the embedding model is loading"}.get(
        state, f"full-text search only ({engine.embedders.reason})"
    )
    auth = "API key required" if engine.config.api_key else "no API key (KB_API_KEY unset)"
    logger.info("kb engine ready at http://%s (%s; %s; data in %s)", engine.config.bind, vectors, auth,
                engine.config.data_dir)


def _close_engine(server: Any, worker: Any) -> None:
    app = getattr(worker, "wsgi", None)
    if isinstance(app, flask.Flask):
        engine_of(app).close()
        logger.info("kb engine stopped")


def serve(config: EngineConfig, log_level: str = "info") -> int:
    """Run until SIGTERM/SIGINT. Returns the process exit status."""
    try:
        EngineServer(config, log_level).run()
    except SystemExit as exit_:  # the arbiter leaves through sys.exit
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0
