"""API key check for /api/v1/*: `Authorization: Bearer <key>` or `X-API-Key: <key>`. /healthz is public.

Keys are compared as sha256 digests with hmac.compare_digest: constant time, and any header value (also
non-ASCII) compares without raising.
"""

from __future__ import annotations

import hashlib
import hmac

from flask import Flask, request

from ..errors import Unauthorized


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


def presented_key() -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.headers.get("X-API-Key") or None


def init_app(app: Flask, api_key: str | None) -> None:
    if not api_key:
        return
    expected = _digest(api_key)

    @app.before_request
    def require_api_key() -> None:
        if not request.path.startswith("/api/"):
            return
        key = presented_key()
        if key is None:
            raise Unauthorized("an API key is required: Authorization: Bearer <key> or X-API-Key: <key>")
        if not hmac.compare_digest(_digest(key), expected):
            raise Unauthorized("the API key is not valid")
