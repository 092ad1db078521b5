"""Signing in and out. Sign-in is protected by a double-submit token (a short-lived cookie and the same value
in the form), since there is no session yet to hold a CSRF token; the session cookie is HttpOnly, SameSite
Strict and lives as long as the session does."""

from __future__ import annotations

import hmac
import secrets
import time

from flask import Response, abort, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from kb_bridge.auth.principal import ANONYMOUS, Principal
from kb_bridge.web.console import PREFIX
from kb_bridge.web.console.guard import COOKIE
from kb_bridge.web.console.state import blueprint, current_console, secure
from kb_bridge.web.console.validity import token_expiry

PRE_COOKIE = "kb_console_signin"


@blueprint.route("/sign-in", methods=["GET", "POST"])
def sign_in() -> ResponseReturnValue:
    if request.method == "GET":
        if g.session is not None:
            return redirect(url_for("console.search"))
        return _sign_in_page(None)
    pre = request.cookies.get(PRE_COOKIE, "")
    sent = request.form.get("csrf_token", "")
    if not pre or not hmac.compare_digest(pre.encode(), sent.encode()):
        abort(403, "the sign-in form's security token is missing or out of date; reload the page and try again")
    token = request.form.get("token", "").strip().encode("utf-8", "surrogateescape")
    console = current_console()
    found, kept, expires = _signing_in(token)
    if found is None:
        console.bridge.metrics.auth_failure("console_token_invalid")
        return _sign_in_page("That access token is not valid. Check it and try again."), 401
    if g.session is not None:
        # Signing in again (perhaps as someone else) replaces the session: the old one must not stay valid,
        # for its remaining hours, behind a cookie this browser no longer holds.
        console.sessions.end(g.session.id)
    session = console.sessions.start(found, kept, expires)
    response = redirect(url_for("console.search"))
    response.set_cookie(COOKIE, session.id, max_age=max(1, int(session.expires - time.time())), httponly=True,
                        samesite="Strict", secure=secure(), path=PREFIX)
    response.delete_cookie(PRE_COOKIE, path=PREFIX)
    return response


def _signing_in(token: bytes) -> tuple[Principal | None, bytes | None, float | None]:
    """(the principal the token makes, the token to keep, when it stops being valid); no principal when the
    token makes none."""
    authenticator = current_console().authenticator
    if not authenticator.enabled:
        return ANONYMOUS, None, None  # no auth configured: the console is as open as /mcp (loopback only)
    found, _reason = authenticator.principal(token) if token else (None, "")
    expires = token_expiry(found, token) if found is not None else None
    if expires is not None and expires <= time.time():
        found = None  # expired, though within the verifier's clock-skew leeway: nothing to sign in for
    # The session asks about the token again on every request (validity.py).
    return found, token, expires


def _sign_in_page(error: str | None) -> Response:
    token = secrets.token_urlsafe(24)
    response = Response(render_template("sign_in.html", title="Sign in", error=error, signin_csrf=token,
                                        open_bridge=not current_console().authenticator.enabled))
    response.set_cookie(PRE_COOKIE, token, max_age=3600, httponly=True, samesite="Strict", secure=secure(), path=PREFIX)
    return response


@blueprint.post("/sign-out")
def sign_out() -> ResponseReturnValue:
    current_console().sessions.end(g.session.id)
    response = redirect(url_for("console.sign_in"))
    response.delete_cookie(COOKIE, path=PREFIX)
    return response
