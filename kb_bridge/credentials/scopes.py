"""The kb:* scope names a token may hold (a named token's `scopes`, an OAuth token's `scope` claim) and
the one check that a list of them names only known scopes."""

from __future__ import annotations

from collections.abc import Iterable

READ, WRITE, DELETE = "kb:read", "kb:write", "kb:delete"
KNOWN_SCOPES = (READ, WRITE, DELETE)


def parse_scopes(values: Iterable[str], where: str) -> frozenset[str]:
    """kb:* scope names, each known; ValueError naming `where` otherwise."""
    scopes = set()
    for value in values:
        if value not in KNOWN_SCOPES:
            raise ValueError(f"{where}: unknown scope {value!r} (known: {', '.join(KNOWN_SCOPES)})")
        scopes.add(value)
    return frozenset(scopes)
