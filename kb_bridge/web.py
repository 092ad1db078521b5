"""The operational endpoints, served by Flask: /healthz (the process is alive) and /readyz
(the engine answers and is recent enough to serve every tool)."""

from __future__ import annotations

from flask import Flask, jsonify
from flask.typing import ResponseReturnValue

from kb_bridge import __version__
from kb_bridge.errors import KbError
from kb_bridge.runtime import Bridge

MIN_ENGINE_VERSION = (3, 0, 0)
# Readiness probes run often and must answer fast, whatever the tool-call timeout is.
READY_TIMEOUT = 2.0


def parse_version(text: str) -> tuple[int, ...] | None:
    parts = text.strip().lstrip("v").split("-", 1)[0].split(".")
    try:
        return tuple(int(p) for p in parts)
    except ValueError:
        return None


def create_web_app(bridge: Bridge) -> Flask:
    app = Flask("kb_bridge.web")

    @app.get("/healthz")
    def healthz() -> ResponseReturnValue:
        return jsonify(ok=True, version=__version__)

    @app.get("/readyz")
    def readyz() -> ResponseReturnValue:
        try:
            status = bridge.engine.status(timeout=READY_TIMEOUT, retry=False)
        except KbError as exc:
            return jsonify(ready=False, engine={"reachable": False, "error": exc.to_dict()}), 503
        version = str(status.get("version", ""))
        parsed = parse_version(version)
        if parsed is None or parsed < MIN_ENGINE_VERSION:
            problem = f"engine version {version or 'unknown'} is older than 3.0.0"
            return jsonify(ready=False, engine={"reachable": True, "version": version, "error": problem}), 503
        return jsonify(ready=True, engine={"reachable": True, "version": version})

    @app.errorhandler(404)
    def not_found(_exc: Exception) -> ResponseReturnValue:
        return jsonify(error="not_found"), 404

    @app.errorhandler(405)
    def not_allowed(_exc: Exception) -> ResponseReturnValue:
        return jsonify(error="method_not_allowed"), 405

    return app
