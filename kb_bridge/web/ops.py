"""The operational endpoints, served by Flask: /healthz (the process is alive) and /readyz
(the engine answers and is recent enough to serve every tool)."""

from __future__ import annotations

import hashlib
import hmac

from flask import Flask, Response, jsonify, redirect, request
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import HTTPException

from kb_bridge import __version__
from kb_bridge.client.versions import engine_version, version_problem
from kb_bridge.errors import EngineBusy, EngineUnavailable, KbError
from kb_bridge.auth.bearer import Authenticator
from kb_bridge.credentials.scopes import KNOWN_SCOPES
from kb_bridge.runtime import Bridge
from kb_bridge.tools import registry
from kb_bridge.settings import OAuthSettings
from kb_bridge.tools.spec import ToolSpec
from kb_bridge.web.body_limit import NOTE_FORM_BYTES, BodyLimits
from kb_bridge.web import console

# Readiness probes run often and must answer fast, whatever the tool-call timeout is.
READY_TIMEOUT = 2.0


def metrics_keys(bridge: Bridge) -> list[bytes] | None:
    """Digests of the tokens that open /metrics: KB_METRICS_TOKEN, else the MCP API keys; None = open
    (only when no auth is configured at all: with named tokens or OAuth alone it stays shut)."""
    mcp = bridge.settings.mcp
    keys = [mcp.metrics_token] if mcp.metrics_token is not None else list(mcp.api_keys)
    if not keys and not mcp.auth_enabled:
        return None
    return [hashlib.sha256(k.reveal().encode()).digest() for k in keys]


def _authorized(keys: list[bytes] | None) -> bool:
    if keys is None:
        return True
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return False
    digest = hashlib.sha256(token.strip().encode("utf-8", "surrogateescape")).digest()
    return any([hmac.compare_digest(digest, key) for key in keys])


def answered(exc: KbError) -> bool:
    """Whether the engine answered the request that failed (a key refused, busy, its database away, an error of
    its own): only a connection or a read that failed or timed out leaves it unreachable, which is what an
    operator reading /readyz looks at first."""
    return isinstance(exc, EngineBusy) or not isinstance(exc, EngineUnavailable)


def protected_resource_metadata(oauth: OAuthSettings) -> dict[str, object]:
    """RFC 9728 protected-resource metadata for /mcp."""
    return {
        "resource": oauth.resource,
        "authorization_servers": [oauth.issuer],
        "scopes_supported": list(KNOWN_SCOPES),
        "bearer_methods_supported": ["header"],
        "resource_name": "kb-bridge",
    }


def create_web_app(bridge: Bridge, authenticator: Authenticator | None = None,
                   available: tuple[ToolSpec, ...] = registry.ALL_TOOLS) -> Flask:
    """The Flask app of everything but /mcp; `available` is the tool set /mcp selects from, so the console
    offers the same tools."""
    app = Flask("kb_bridge.web")
    # Each path's own limit is enforced in front of Flask, before the body is read (web/body_limit.py);
    # Flask's are only a backstop, so they must let the largest of them through: an upload, and a note's
    # text at its largest as a form field (werkzeug's default for a form field is 500 kB).
    limits = BodyLimits.for_settings(bridge.settings)
    app.config["MAX_CONTENT_LENGTH"] = limits.largest
    app.config["MAX_FORM_MEMORY_SIZE"] = NOTE_FORM_BYTES
    keys = metrics_keys(bridge)
    console.register(app, bridge, authenticator or Authenticator(bridge.settings.mcp), available)

    @app.get("/")
    def index() -> ResponseReturnValue:
        """A browser goes to the console; any other client gets a JSON map of where things are."""
        if request.accept_mimetypes.best_match(["application/json", "text/html"]) == "text/html":
            return redirect("/ui/", 302)
        return jsonify(name="kb-bridge", version=__version__, mcp="/mcp", console="/ui/", health="/healthz")

    @app.get("/healthz")
    def healthz() -> ResponseReturnValue:
        return jsonify(ok=True, version=__version__)

    @app.get("/readyz")
    def readyz() -> ResponseReturnValue:
        try:
            status = bridge.engine.status(timeout=READY_TIMEOUT, retry=False)
        except KbError as exc:
            return jsonify(ready=False, engine={"reachable": answered(exc), "error": exc.to_dict()}), 503
        version = engine_version(status)
        problem = version_problem(status)
        if problem is not None:
            return jsonify(ready=False, engine={"reachable": True, "version": version, "error": problem}), 503
        return jsonify(ready=True, engine={"reachable": True, "version": version})

    @app.get("/metrics")
    def metrics() -> ResponseReturnValue:
        if not bridge.settings.mcp.metrics:
            return jsonify(error="not_found"), 404
        if not _authorized(keys):
            bridge.metrics.auth_failure("metrics_token")
            return jsonify(error="invalid_token"), 401, {"WWW-Authenticate": 'Bearer realm="kb-bridge-metrics"'}
        body, content_type = bridge.metrics.exposition()
        return Response(body, content_type=content_type)

    oauth = bridge.settings.mcp.oauth
    if oauth.enabled:
        metadata = protected_resource_metadata(oauth)

        @app.get("/.well-known/oauth-protected-resource")
        @app.get("/.well-known/oauth-protected-resource/mcp")
        def resource_metadata() -> ResponseReturnValue:
            # Public by design (RFC 9728): how a client finds the authorization server; browsers may read it.
            return jsonify(metadata), 200, {"Cache-Control": "public, max-age=3600", "Access-Control-Allow-Origin": "*"}

    # A /ui/ path no view matches gets the console's error page and headers (CSP, no-store, ...), not JSON.
    @app.errorhandler(404)
    def not_found(exc: HTTPException) -> ResponseReturnValue:
        if console.serves(request.path):
            return console.unrouted(exc)
        return jsonify(error="not_found"), 404

    @app.errorhandler(405)
    def not_allowed(exc: HTTPException) -> ResponseReturnValue:
        if console.serves(request.path):
            return console.unrouted(exc)
        return jsonify(error="method_not_allowed"), 405

    return app
