"""What MCP Inspector's tools/list portability check reports for a schema (its rules, in Python), for the
tests of the published tool schemas and of the TypeScript client's listing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

TYPES = {"null", "boolean", "object", "array", "number", "string", "integer"}
CONSTRAINING = {
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "format", "maxItems", "minItems", "uniqueItems", "maxProperties",
    "minProperties", "required", "allOf", "anyOf", "oneOf", "not", "items", "prefixItems", "contains",
    "properties", "patternProperties", "additionalProperties", "propertyNames", "$ref",
}
MAPS = ("properties", "patternProperties", "$defs", "definitions")
LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
SINGLES = ("items", "additionalProperties", "not", "contains", "propertyNames")


def findings(node: Any, path: str = "") -> Iterator[str]:
    """What Inspector's portability check reports for one schema (its rules, in Python)."""
    if isinstance(node, bool):
        if not path.endswith("additionalProperties"):
            yield f"{path}: bare boolean schema"
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if isinstance(kind, list) and all(k in TYPES for k in kind):
        yield f"{path}: type union {kind}"
    ref = node.get("$ref")
    if isinstance(ref, str) and ref and not ref.startswith("#"):
        yield f"{path}: remote $ref"
    if not CONSTRAINING & set(node) and not path.endswith("not"):
        yield f"{path}: constrains nothing"
    for key in MAPS:
        for name, sub in (node.get(key) or {}).items():
            yield from findings(sub, f"{path}.{key}.{name}")
    for key in LISTS:
        for i, sub in enumerate(node.get(key) or []):
            yield from findings(sub, f"{path}.{key}[{i}]")
    for key in SINGLES:
        if key in node:
            yield from findings(node[key], f"{path}.{key}")
