"""Which engines the bridge can serve: the engine-version rule, in one place.

An engine older than 3.0.0 has no `PATCH /api/v1/notes/{id}` (note updates arrived in 3.0.0), so the bridge
needs 3.0.0 or newer to serve every tool. An engine that does not say its version is treated as older.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MIN_ENGINE_VERSION = (3, 0, 0)
# Search and listings filtered by created/updated time (kb_search and kb_list `since`/`until`).
TIME_FILTERS_VERSION = (3, 8, 0)
# A note's earlier versions (GET /documents/{id}?version=N, GET …/versions): kb_get's `version`.
VERSIONS_VERSION = (3, 9, 0)
# Listings paged by key (GET /documents?after=): kb_list's and resources/list's cursors (tools/cursors.py).
KEYSET_PAGING_VERSION = (3, 14, 0)


def parse_version(text: str) -> tuple[int, ...] | None:
    """`3.2.0`, `v3.1`, `3.0.0-rc1` as a tuple of numbers; None when it is not a version."""
    parts = text.strip().lstrip("v").split("-", 1)[0].split(".")
    try:
        return tuple(int(p) for p in parts)
    except ValueError:
        return None


def engine_version(status: Mapping[str, Any]) -> str:
    return str(status.get("version", ""))


def version_problem(status: Mapping[str, Any]) -> str | None:
    """None when the engine (its /status answer) can serve every tool, else what is wrong with it."""
    version = engine_version(status)
    parsed = parse_version(version)
    if parsed is None or parsed < MIN_ENGINE_VERSION:
        return f"engine version {version or 'unknown'} is older than 3.0.0 (it cannot update notes)"
    return None


def lacks_time_filters(status: Mapping[str, Any]) -> str:
    """Why an engine that answered a time-filtered request without saying it applied the bounds cannot
    serve it (it ignored them: its results are not filtered)."""
    version = engine_version(status) or "unknown"
    wanted = ".".join(str(n) for n in TIME_FILTERS_VERSION)
    return f"the kb engine (version {version}) cannot filter by time; since and until need engine {wanted} or newer"


def lacks_versions(status: Mapping[str, Any], version: int) -> str:
    """Why an engine that answered a request for an earlier version with another version cannot serve it (it
    ignored `?version=` and answered the document as it is now)."""
    engine = engine_version(status) or "unknown"
    wanted = ".".join(str(n) for n in VERSIONS_VERSION)
    return (f"the kb engine (version {engine}) keeps no earlier versions, so it cannot answer version {version}; "
            f"that needs engine {wanted} or newer")


def lacks_keyset_paging(status: Mapping[str, Any]) -> str:
    """Why an engine that answered a listing asked for `after` without saying it applied it cannot serve the
    cursor (it listed from the start: the page would repeat what the agent has)."""
    version = engine_version(status) or "unknown"
    wanted = ".".join(str(n) for n in KEYSET_PAGING_VERSION)
    return (f"the kb engine (version {version}) cannot continue this listing from its cursor (that needs engine "
            f"{wanted} or newer); list again without a cursor")
