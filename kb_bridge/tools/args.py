"""JSON-schema fragments for tool arguments, shared so every tool validates a field the same way.

Order inside each fragment matters: size caps (maxLength, maxItems) come before per-item rules,
so the first error the validator yields for a 100 000-element array is the cap, found at once.
"""

from __future__ import annotations

from typing import Any

from kb_bridge import collections

# Printable text without control characters (tags, titles, paths end up in headers and logs).
_NO_CONTROL = r"^[^\x00-\x1f\x7f]*$"

QUERY = {"type": "string", "minLength": 1, "maxLength": 4000}
TOP = {"type": "integer", "minimum": 1, "maximum": 50, "default": 10}
TAG = {"type": "string", "minLength": 1, "maxLength": 200, "pattern": _NO_CONTROL}
TAGS = {"type": "array", "maxItems": 20, "items": TAG}
COLLECTION = {"type": "string", "maxLength": 64, "pattern": collections.NAME_PATTERN}
DOC_TYPE = {"type": "string", "maxLength": 20, "pattern": r"^[a-z0-9]+$"}
DOCUMENT_ID = {"type": "integer", "minimum": 1, "maximum": 2**53}
NOTE_TEXT = {"type": "string", "minLength": 1, "maxLength": 1_000_000}
TITLE = {"type": "string", "minLength": 1, "maxLength": 500, "pattern": _NO_CONTROL}
SOURCE_PATH = {"type": "string", "minLength": 1, "maxLength": 1024, "pattern": _NO_CONTROL}
MODE = {"type": "string", "enum": ["hybrid", "fts", "vector"]}
JOB_STATUS = {"type": "string", "enum": ["queued", "running", "done", "failed"]}


def with_description(fragment: dict[str, Any], description: str) -> dict[str, Any]:
    return {**fragment, "description": description}


def arguments(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """A tool input schema: an object with exactly these properties and no others."""
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema
