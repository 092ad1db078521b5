"""The console's guard, run before every view: the session from its cookie, standing only while its token
does (validity.py); no session, a redirect to sign in (GET) or 401; a POST without the session's CSRF token
(a form field or the X-CSRF-Token header), 403 and nothing changes. Pages get the session, the principal,
what it may use and the CSRF token for their forms."""

from __future__ import annotations

import hmac
import logging
from dataclasses import replace
from typing import Any

from flask import abort, g, redirect, request, url_for
from flask.typing import ResponseReturnValue

from kb_bridge.web.console.offer import UPLOAD_TOOLS
from kb_bridge.web.console.sessions import Session
from kb_bridge.web.console.state import blueprint, current_console
from kb_bridge.web.console.validity import current_principal

logger = logging.getLogger(__name__)

COOKIE = "kb_console"


@blueprint.before_request
def load_session() -> ResponseReturnValue | None:
    if request.endpoint == "console.static":
        g.session = None
        return None
    g.session = _standing(current_console().sessions.find(request.cookies.get(COOKIE)))
    if request.endpoint == "console.sign_in":
        return None
    if g.session is None:
        if request.method == "GET":
            return redirect(url_for("console.sign_in"))
        abort(401)
    if request.method == "POST":
        sent = request.form.get("csrf_token") or request.headers.get("X-CSRF-Token") or ""
        if not hmac.compare_digest(sent.encode(), g.session.csrf.encode()):
            abort(403, "the form's security token is missing or out of date; reload the page and try again")
    return None


def _standing(session: Session | None) -> Session | None:
    """The session with the principal its token makes now; None (and the record gone) when the token no
    longer makes one."""
    g.session_ended = False
    if session is None:
        return None
    console = current_console()
    now, reason = current_principal(console.authenticator, session)
    if now is None:
        console.sessions.end(session.id)
        g.session_ended = True
        console.bridge.metrics.auth_failure("console_session_ended")
        logger.info("ended a console session of %s: its token is no longer valid (%s)", session.principal.name,
                    reason.replace("_", " "))
        return None
    return replace(session, principal=now)


@blueprint.context_processor
def page_context() -> dict[str, Any]:
    session = getattr(g, "session", None)
    who = session.principal if session else None
    tools = current_console().tools

    def can(*names: str) -> bool:
        return who is not None and tools.usable(who, *names)

    return {"session": session, "principal": who, "can": can, "can_upload": can(*UPLOAD_TOOLS),
            "csrf": session.csrf if session else ""}
