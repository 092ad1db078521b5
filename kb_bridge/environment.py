"""Reading environment variables, for both programs: the bridge's settings (settings.py) and the engine's
configuration (local_engine/config.py) read through `Env`, test loopback with `is_loopback_host`, and split
a listen address with `parse_bind`.

One rule for every variable of either program: a variable that is unset, empty or only blanks is unset, and
its default applies; a value has its surrounding blanks stripped. A bad value raises SettingsError naming the
variable. A leaf: it imports nothing from kb_bridge but `errors`, so the engine can read its configuration
without loading the bridge's settings or auth.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from kb_bridge.errors import SettingsError

T = TypeVar("T")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class Env:
    """Typed access to one environment mapping; every error names the variable."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def raw(self, name: str) -> str | None:
        value = self._environ.get(name)
        if value is None or value.strip() == "":
            return None
        return value.strip()

    def get(self, name: str, default: T, parse: Callable[[str], T]) -> T:
        """`parse` of the value, or `default` when unset; a ValueError or TypeError of `parse` becomes a
        SettingsError naming the variable, with the error's text as the problem."""
        value = self.raw(name)
        if value is None:
            return default
        try:
            return parse(value)
        except (ValueError, TypeError) as exc:
            raise SettingsError(name, str(exc)) from None

    def text(self, name: str, default: str) -> str:
        return self.get(name, default, str)

    def integer(self, name: str, default: int, low: int = 1, high: int | None = None) -> int:
        return self.get(name, default, lambda v: _bounded(_integer(v), low, high))

    def number(self, name: str, default: float, low: float = 0.0, high: float | None = None) -> float:
        return self.get(name, default, lambda v: _bounded(_number(v), low, high))

    def flag(self, name: str, default: bool) -> bool:
        return self.get(name, default, parse_bool)

    def items(self, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
        """A comma-separated list; blank items are dropped."""
        return self.get(name, default, parse_list)

    def path(self, name: str) -> Path | None:
        return self.get(name, None, Path)


def parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"expected 1/0, true/false, yes/no or on/off, got {value!r}")


def parse_list(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


def parse_bind(value: str) -> tuple[str, int]:
    """`HOST:PORT` into the host and the port; an IPv6 host in brackets (`[::1]:8000`), returned without them.
    ValueError otherwise. Both programs' listen addresses (KB_BIND, KB_ENGINE_BIND, --bind)."""
    host, sep, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if (not sep or not host or "[" in host or "]" in host or not (port.isascii() and port.isdigit())
            or not 0 <= int(port) <= 65535):
        raise ValueError(f"expected HOST:PORT with a port from 0 to 65535 (IPv6 as [::1]:8000), got {value!r}")
    return host, int(port)


_LOOPBACK_V4 = ipaddress.IPv4Network("127.0.0.0/8")
_LOOPBACK_V6 = ipaddress.IPv6Address("::1")


def is_loopback_host(host: str | None) -> bool:
    """Whether `host` is loopback: an IP address in 127.0.0.0/8, the IPv6 loopback ::1 (in brackets or not),
    or the name `localhost` in any case. Nothing else: a name such as 127.example.com or localhost.example.com
    can point anywhere. The one test of loopback of both programs: where the bridge tolerates plain http (OAuth,
    `kb-bridge check`), and where the engine serves without a key."""
    if host is None:
        return False
    if host.lower() == "localhost":
        return True
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        address = ipaddress.ip_address(host[1:-1] if bracketed else host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv4Address):
        return not bracketed and address in _LOOPBACK_V4
    return address == _LOOPBACK_V6  # ::ffff:127.0.0.1 and ::1%zone are not ::1


def _integer(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"expected an integer, got {value!r}") from None


def _number(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"expected a number, got {value!r}") from None
    if math.isnan(number):
        raise ValueError(f"expected a number, got {value!r}")
    return number


def _bounded(value: T, low: T, high: T | None) -> T:
    if high is not None and not low <= value <= high:  # type: ignore[operator]
        raise ValueError(f"must be between {low} and {high}, got {value}")
    if value < low:  # type: ignore[operator]
        raise ValueError(f"must be at least {low}, got {value}")
    return value
