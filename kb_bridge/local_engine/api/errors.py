"""The one place where exceptions become HTTP responses: `{"error": {"code", "message"}}`, plus `field` when the
error names one.

Our own errors carry their code and status. Werkzeug's HTTP errors (unknown route, wrong method, body
over the limit) get the same JSON shape. Anything else is a bug: logged with its traceback, answered with
a generic 500 that reveals nothing.
"""

from __future__ import annotations

import errno
import logging

from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException

from ..errors import EngineError, StorageFull, Unauthorized, sqlite_full

logger = logging.getLogger(__name__)

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    412: "precondition_failed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    421: "misdirected_request",
    422: "validation_error",
    503: "not_ready",
}
_HTTP_MESSAGES = {
    404: "no such endpoint",
    413: "the request body is larger than this engine accepts",
}


def error_response(status: int, code: str, message: str, field: str | None = None) -> Response:
    error = {"code": code, "message": message}
    if field:
        error["field"] = field
    response = jsonify({"error": error})
    response.status_code = status
    return response


def _engine_error(error: EngineError) -> Response:
    response = error_response(error.status, error.code, error.message, error.field)
    if isinstance(error, Unauthorized):
        response.headers["WWW-Authenticate"] = 'Bearer realm="kb-engine"'
    return response


def _http_error(error: HTTPException) -> Response:
    status = error.code or 500
    code = _HTTP_CODES.get(status, "internal" if status >= 500 else "bad_request")
    message = _HTTP_MESSAGES.get(status) or (error.description or error.name)
    response = error_response(status, code, message)
    allowed = getattr(error, "valid_methods", None)
    if status == 405 and allowed:
        response.headers["Allow"] = ", ".join(allowed)
    return response


# A file the engine writes that cannot grow: no room on the disk, the user's quota, RLIMIT_FSIZE.
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _unexpected(error: Exception) -> Response:
    full = _full_disk(error)
    if full is not None:
        logger.error("a request failed: %s", full, exc_info=error)
        return _engine_error(full)
    logger.exception("unhandled error while serving a request")
    return error_response(500, "internal", "internal error; the engine log has the details")


def _full_disk(error: BaseException) -> StorageFull | None:
    """A full disk found in `error` or what it was raised from, as the 507 a client can act on; None for
    anything else. SQLite rolls the statement's transaction back (SQLITE_FULL), and an upload's part file
    goes with its request, so nothing of the request is stored."""
    seen: BaseException | None = error
    for _ in range(8):  # the chain an exception was raised from (or while handling)
        if seen is None:
            return None
        if isinstance(seen, OSError) and seen.errno in _FULL_ERRNOS:
            reason = seen.strerror or "no space left"
            break
        if sqlite_full(seen):
            reason = "the database could not grow"
            break
        seen = seen.__cause__ or seen.__context__
    else:
        return None
    return StorageFull(reason)


def init_app(app: Flask) -> None:
    app.register_error_handler(EngineError, _engine_error)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected)
