"""Questions the end-to-end tests and benchmarks ask the engine directly, past the bridge."""

from __future__ import annotations

from typing import Any

import requests


def _get(engine_url: str, key: str, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
    response = requests.get(f"{engine_url}{path}", params=params, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    response.raise_for_status()
    return dict(response.json())


def engine_idle(engine_url: str, key: str) -> bool:
    """No ingestion job queued or running."""
    queue = _get(engine_url, key, "/api/v1/status")["queue"]
    return bool(queue["queued"] == 0 and queue["running"] == 0)


def documents_at(engine_url: str, key: str, source_path: str) -> int:
    """How many documents the engine holds at one source path."""
    return int(_get(engine_url, key, "/api/v1/documents", {"source_path": source_path})["total"])
