"""A job's `tags` (engine 3.7), the same in every store: the tags its document gets, kept in a column of
their own rather than only in the payload, which is dropped when the job ends. So a job says where its
document goes while it is queued, while it runs and after it failed (the bridge decides from this who may
see a job that has no document).
"""

from __future__ import annotations

import json
from typing import Any


def stored_tags(payload: dict[str, Any] | None) -> str | None:
    """The `tags` column of a new job: its request's tags as JSON (None for a job without a payload)."""
    if payload is None:
        return None
    return json.dumps([str(tag) for tag in payload.get("tags") or []])


def job_tags(stored: str | None) -> list[str] | None:
    """The `tags` a job reports: None for a job without tags of its own (an `update`, which has its
    document from the start) or one queued by an engine before 3.7."""
    return [str(tag) for tag in json.loads(stored)] if stored is not None else None
