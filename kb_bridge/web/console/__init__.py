"""The web console at /ui/: people see and fix what agents stored, through the same tool handlers the MCP
tools run (so a token's scopes and collections limit the console exactly as they limit an agent).

Server-rendered pages that work without JavaScript; console.js only adds upload progress, the live job
status and the delete confirmation. Sessions are server-side (sessions.py); every state-changing request
carries the session's CSRF token (a form field or the X-CSRF-Token header), else 403 and nothing changes
(guard.py). Sign-in itself is protected by a double-submit token (sign_in.py).

One blueprint (state.py) that each module registers on: the guard (guard.py), the headers and error pages
(headers.py), and the pages (sign_in.py, search.py, browse.py, documents.py, history.py, jobs.py, uploads.py; writing.py and
tags.py for curating). The views
read the bridge, the authenticator, the sessions and the tool offer from the app (state.Console, set once
by `register`).

Three rules make the console no wider than /mcp:
- it runs only the tools the bridge offers agents (offer.py: KB_MCP_READ_ONLY, KB_MCP_TOOLS) and shows
  controls only for those the principal may use; an upload runs the three upload tools, so it is staged and
  counted against the caller's upload limits like an agent's;
- a session lasts as long as its token (validity.py): every request asks the authenticator again;
- a job is visible by the rule every job view shares (tools/reach.py, job_visible), decided from the job.
"""

from __future__ import annotations

from flask import Flask, Response
from werkzeug.exceptions import HTTPException

from kb_bridge.auth.bearer import Authenticator
from kb_bridge.runtime import Bridge
from kb_bridge.tools import registry
from kb_bridge.tools.spec import ToolSpec


def register(app: Flask, bridge: Bridge, authenticator: Authenticator,
             available: tuple[ToolSpec, ...] = registry.ALL_TOOLS) -> None:
    """Serve the console at /ui/ on this app; `available` is the tool set /mcp selects from (the same
    selection)."""
    # Imported here, as the engine's api/ imports its blueprints, so that importing the package does no work;
    # importing a module is what adds its views (and the guard, headers and error pages) to the blueprint.
    from kb_bridge.web.console import browse, documents, guard, headers, history, jobs, search, sign_in, uploads  # noqa: F401
    from kb_bridge.web.console import tags, writing  # noqa: F401
    from kb_bridge.web.console.state import EXTENSION, Console, blueprint

    app.extensions[EXTENSION] = Console.build(bridge, authenticator, available)
    app.register_blueprint(blueprint)


PREFIX = "/ui"


def serves(path: str) -> bool:
    """Whether `path` is the console's (its error pages, not the app's JSON ones, answer for it)."""
    return path == PREFIX or path.startswith(PREFIX + "/")


def unrouted(exc: HTTPException) -> Response:
    """The console's answer to a routing error of one of its paths (headers.py)."""
    from kb_bridge.web.console.headers import unrouted as page

    return page(exc)
