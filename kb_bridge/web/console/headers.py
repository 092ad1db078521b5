"""What every console response carries: no caching, the security headers (a strict Content-Security-Policy
the pages are written for: no inline script or style), the session cookie removed once its session ended;
and the error pages, HTML or JSON as the request asked, a /ui/ path that no view matches included."""

from __future__ import annotations

from collections.abc import Callable

from flask import Response, g, jsonify, make_response, render_template
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import HTTPException

from kb_bridge.errors import KbError
from kb_bridge.web.console import PREFIX
from kb_bridge.web.console.guard import COOKIE
from kb_bridge.web.console.state import blueprint, wants_json

# The statuses the console itself refuses with (werkzeug's HTTP errors): each gets the console's error page.
REFUSED = (400, 401, 403, 404, 405, 413)


@blueprint.after_request
def headers(response: Response) -> Response:
    if getattr(g, "session_ended", False):
        response.delete_cookie(COOKIE, path=PREFIX)
    response.headers.setdefault("Cache-Control", "no-store")
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
        "form-action 'self'; base-uri 'none'")
    return response


@blueprint.errorhandler(KbError)
def kb_error(exc: KbError) -> ResponseReturnValue:
    message = f"{exc.code}: {exc.message}"
    if wants_json():
        return jsonify(error=message), exc.http_status
    return render_template("error.html", title="Something went wrong", message=message), exc.http_status


def refused(status: int) -> Callable[[Exception], ResponseReturnValue]:
    def handler(exc: Exception) -> ResponseReturnValue:
        message = getattr(exc, "description", "") or "refused"
        if wants_json():
            return jsonify(error=message), status
        return render_template("error.html", title="Refused", message=message), status
    return handler


for _status in REFUSED:
    blueprint.register_error_handler(_status, refused(_status))


def unrouted(exc: HTTPException) -> Response:
    """The answer to a /ui/ path no view matched (404) or no method of it did (405): the console's error page
    with its headers. Routing errors reach the app's error handlers, never the blueprint's (web/ops.py passes
    them here), and the blueprint's after_request does not run for them either."""
    return headers(make_response(refused(exc.code or 404)(exc)))
