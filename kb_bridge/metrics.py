"""Metrics hooks. The rest of the bridge reports through this small interface; the Prometheus
implementation (multiprocess-safe under gunicorn) plugs in behind it."""

from __future__ import annotations


class Metrics:
    """Records nothing: the default when metrics are off, and the interface's definition."""

    def tool_call(self, tool: str, outcome: str, seconds: float) -> None:
        """One finished tool call; outcome is "ok" or an error code."""

    def engine_request(self, endpoint: str, outcome: str, seconds: float) -> None:
        """One attempt at an engine request; outcome is the HTTP status or a transport error."""

    def auth_failure(self, reason: str) -> None:
        """A request refused at the door (missing or wrong token, bad host or origin)."""
