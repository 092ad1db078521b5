"""What a browser must not be able to make the engine do: the DNS-rebinding and cross-site guard.

A keyless engine on a developer's laptop (`--allow-no-auth`, or just loopback without KB_API_KEY) is
reachable by any web page the developer opens: through DNS rebinding (an attacker's host name that resolves
to 127.0.0.1) and through cross-site requests (form posts, `fetch` with `text/plain`). So, keyed or not:

- the `Host` must be a loopback name, the bind address, or one of KB_ENGINE_ALLOWED_HOSTS (any port),
  else 421;
- an `Origin`, when a browser sends one, must be the engine's own (the origin of the Host it was sent to)
  or one of KB_ENGINE_ALLOWED_ORIGINS, else 403 (`Origin: null` too); requests without Origin are not
  from a page and pass;
- JSON bodies must say `application/json` (api/validation.py), else 415: a page can send `text/plain` or
  a form without a preflight, never `application/json`.

All of it runs before any handler, so a refused request stores, changes and deletes nothing. /healthz is
exempt (it tells nothing; load balancers probe it with whatever Host they like).
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from flask import Flask, request

from ..config import EngineConfig
from ..errors import Forbidden, MisdirectedRequest

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def host_name(value: str) -> str:
    """The host part of a Host header or a netloc (`[::1]:8000` → `::1`), lower-cased."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def allowed_host_names(config: EngineConfig) -> frozenset[str]:
    names = {*LOOPBACK_NAMES, *config.allowed_hosts}
    try:
        unspecified = ipaddress.ip_address(config.host).is_unspecified
    except ValueError:
        unspecified = False
    if not unspecified:
        names.add(config.host.lower())
    return frozenset(names)


def init_app(app: Flask, config: EngineConfig) -> None:
    hosts = allowed_host_names(config)
    origins = frozenset(origin.rstrip("/") for origin in config.allowed_origins)

    @app.before_request
    def guard() -> None:
        if request.path == "/healthz":
            return
        host = request.headers.get("Host", "")
        if "*" not in hosts and host_name(host) not in hosts:
            raise MisdirectedRequest(
                f"this engine does not answer for host {host[:100]!r}; add it to KB_ENGINE_ALLOWED_HOSTS if it is yours"
            )
        origin = request.headers.get("Origin")
        if origin is not None and not _same_origin(origin, host) and origin.rstrip("/").lower() not in origins:
            raise Forbidden("cross-site requests are refused (Origin not allowed; see KB_ENGINE_ALLOWED_ORIGINS)")


def _same_origin(origin: str, host: str) -> bool:
    parts = urlsplit(origin.strip())
    return parts.scheme in ("http", "https") and bool(parts.netloc) and parts.netloc.lower() == host.strip().lower()
