"""The PostgreSQL URL (KB_ENGINE_DATABASE_URL, --database-url, and `kb-bridge migrate --to`): checked before
libpq reads it, and shown only without its password.

Why check it ourselves: libpq reads a URL its own way, and its faults reach messages with the password in
them. Its parser raises with the offending token quoted ("invalid percent-encoded token: "pa%ss"") for a
`%` that starts no %XX escape or for a space. And it ends the user name and password at the first `@` or `/`:
a raw `@` in a password moves the password's tail into the host (then "failed to resolve host 'tail@db'"),
a raw `/` makes the user name the host and the password the port. So a URL that libpq would misread is
refused here with a message naming the setting and the rule, never quoting the URL.

Pure Python (no psycopg): the engine checks the URL while reading its configuration.
"""

from __future__ import annotations

import re

from .errors import ConfigError

SCHEMES = ("postgresql://", "postgres://")
ENCODE = ("percent-encode these characters in the user name and password: @ as %40, / as %2F, : as %3A, "
          "% as %25, a space as %20")
# A % that does not start a %XX escape; %00 is refused by libpq (a NUL cannot be in a C string).
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})|%00")
_QUERY_PASSWORD = re.compile(r"(?i)([?&]password=)[^&]*")


def check(url: str, setting: str) -> None:
    """Raise ConfigError, naming `setting` and never quoting the URL, unless libpq reads it as written."""
    if not url.startswith(SCHEMES):
        raise ConfigError(f"{setting} must be a postgresql:// URL (postgresql://user:password@host:port/database)")
    problem = _problem(url.split("://", 1)[1])
    if problem:
        raise ConfigError(f"{setting} cannot be read as a PostgreSQL URL: {problem}; {ENCODE}")


def _problem(rest: str) -> str | None:
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in rest):
        return "it holds a space or a control character"
    if _BAD_PERCENT.search(rest):
        return "it holds a % that does not start a %XX escape (or %00)"
    at, slash = rest.find("@"), rest.find("/")
    if at >= 0 and (0 <= slash < at or "@" in rest[at + 1:]):
        return "it holds more than one @, or a / before its @"
    authority = re.split(r"[/?]", rest[at + 1:], maxsplit=1)[0]
    for host in authority.split(","):
        after_address = host.rpartition("]")[2] if host.startswith("[") else host
        _, colon, port = after_address.rpartition(":")
        if colon and not (port.isascii() and port.isdigit()):
            return "its port is not a number"
    return None


def redacted(url: str) -> str:
    """The URL without its password, for logs and messages: postgresql://user:***@host/db.

    The password is everything between the user name's `:` and the last `@`, so a password holding `@`, `/`,
    `:` or `?` is hidden whole (a URL with an `@` further on hides more than its password, never less).
    A `password=` query parameter is hidden too."""
    scheme, sep, rest = url.partition("://")
    if sep:
        userinfo, at, after = rest.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        if at and colon:
            rest = f"{user}:***@{after}"
        url = f"{scheme}{sep}{rest}"
    return _QUERY_PASSWORD.sub(r"\1***", url)
