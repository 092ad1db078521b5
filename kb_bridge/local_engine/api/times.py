"""Time input of the API (engine 3.8): the bounds that filter search and listings by a document's
created_at / updated_at, and the times an imported document keeps.

Bounds: `*_after` is inclusive (>=), `*_before` exclusive (<), so adjacent ranges never share a document.
Every value is an ISO-8601 timestamp (clock.parse_iso: a bare date or a time without offset is UTC); a
wrong one, or an after later than its before, is 422 naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..clock import parse_bound, parse_iso
from ..errors import ValidationError

BOUNDS = ("created_after", "created_before", "updated_after", "updated_before")


def timestamp(source: Mapping[str, Any], name: str, required: bool = False,
              parse: Callable[[str, str], str] = parse_iso) -> str | None:
    """An ISO-8601 field of a body or query string, normalised by `parse` (clock.py: a bound's part of a
    millisecond rounded up, parse_bound); None when absent and not required."""
    value = source.get(name)
    if value is None or value == "":
        if required:
            raise ValidationError(f"{name} is required", field=name)
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be an ISO-8601 timestamp string", field=name)
    return parse(value, name)


def time_bounds(source: Mapping[str, Any], updated_since: str | None = None) -> dict[str, str | None]:
    """The four bounds of a JSON body or query string (absent ones None). `updated_since`, the listing's
    older name for updated_after, narrows it further when both are given."""
    bounds = {name: timestamp(source, name, parse=parse_bound) for name in BOUNDS}
    if updated_since is not None:
        since = parse_bound(updated_since, "updated_since")
        after = bounds["updated_after"]
        bounds["updated_after"] = since if after is None else max(after, since)
    for field in ("created", "updated"):
        after, before = bounds[f"{field}_after"], bounds[f"{field}_before"]
        if after is not None and before is not None and after > before:
            raise ValidationError(f"{field}_after must not be later than {field}_before", field=f"{field}_after")
    return bounds


def document_times(source: Mapping[str, Any]) -> dict[str, str]:
    """`created_at` and `updated_at` a new document keeps instead of the time its job finishes (import):
    created_at alone sets both; updated_at needs created_at and must not be earlier."""
    created = timestamp(source, "created_at")
    updated = timestamp(source, "updated_at")
    if updated is not None and created is None:
        raise ValidationError("updated_at needs created_at", field="created_at")
    if created is None:
        return {}
    if updated is not None and updated < created:
        raise ValidationError("updated_at must not be earlier than created_at", field="updated_at")
    return {"created_at": created, "updated_at": updated or created}
