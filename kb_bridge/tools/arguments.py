"""Tool arguments as typed models: one frozen dataclass per tool is the single source of its inputSchema
and of the handler's parsing (names, types, defaults, limits), so nothing is written twice.

Two schemas come out of a model: the full one, which validates every call here (every bound and pattern),
and the advertised one, which tools/list publishes (`advertised_schema`): the names, types, enums, defaults
and descriptions an agent writes a call from, without the safety caps and patterns it never needs to read.

A field's JSON-schema fragment sits in its metadata (`spec(...)`); its Python default is the default an
agent gets and the `default` the schema publishes. A field without a default is required; a field whose
default is None is optional and has no published default. `parser(Model)` compiles the schema once and
turns a raw arguments object into a `Model` after validating it (errors name the field, tools/validation.py).

The fragments below are shared so every tool checks a field the same way. Order inside each fragment
matters: size caps (maxLength, maxItems) come before per-item rules, so the first error the validator
yields for a 100 000-element array is the cap, found at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from kb_bridge import collection_tags
from kb_bridge.tools.validation import ArgumentValidator

# Printable text without control characters (tags, titles, paths end up in headers and logs): the rule of
# tags, which the bridge also checks outside the tools (collection_tags.check_tag); in the tools also not only
# white space (as str.isspace has it: `\s` of Python's re), which the engine refuses (`title must not be empty`),
# and then with no field named.
_CONTROL = r"\x00-\x1f\x7f"  # collection_tags.TAG_PATTERN's
_TEXT = rf"^[^{_CONTROL}]*[^{_CONTROL}\s][^{_CONTROL}]*$"
_NOT_BLANK = r"\S"  # a note's text and a query: anything, but not only white space

_DOC_TYPE_PATTERN = r"^[a-z0-9]+$"
SHA256_PATTERN = "^[0-9a-fA-F]{64}$"

# What each pattern means, in words: a value that breaks one is told the rule (tools/validation.py).
PATTERN_RULES = {
    collection_tags.NAME_PATTERN: f"a collection name of {collection_tags.NAME_RULE}",
    _TEXT: "text without control characters (no newlines or tabs), and not only spaces",
    _NOT_BLANK: "text with more than white space",
    _DOC_TYPE_PATTERN: "a file type in lower-case letters and digits, e.g. note, md, pdf",
    SHA256_PATTERN: "a sha256 digest: 64 hexadecimal digits",
}

QUERY = {"type": "string", "minLength": 1, "maxLength": 4000, "pattern": _NOT_BLANK}
TOP = {"type": "integer", "minimum": 1, "maximum": 50}
TAG = {"type": "string", "minLength": 1, "maxLength": collection_tags.TAG_MAX_LENGTH, "pattern": _TEXT}
TAGS = {"type": "array", "maxItems": 20, "items": TAG}
COLLECTION = {"type": "string", "maxLength": 64, "pattern": collection_tags.NAME_PATTERN}
DOC_TYPE = {"type": "string", "maxLength": 20, "pattern": _DOC_TYPE_PATTERN}
# The largest document or chunk id a tool takes: the largest whole number a JSON client (a double) holds exactly.
LARGEST_ID = 2**53
DOCUMENT_ID = {"type": "integer", "minimum": 1, "maximum": LARGEST_ID}
# A note's version number: the engine counts versions in 32 bits (PostgreSQL INTEGER) and refuses a version
# path beyond this, so no larger one can be asked for or expected.
VERSION = {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}
NOTE_TEXT = {"type": "string", "minLength": 1, "maxLength": 1_000_000, "pattern": _NOT_BLANK}
TITLE = {"type": "string", "minLength": 1, "maxLength": 500, "pattern": _TEXT}
SOURCE_PATH = {"type": "string", "minLength": 1, "maxLength": 1024, "pattern": _TEXT}
MODE = {"type": "string", "enum": ["hybrid", "fts", "vector"]}
JOB_STATUS = {"type": "string", "enum": ["queued", "running", "done", "failed", "cancelled"]}
BOOLEAN = {"type": "boolean"}
PAGE_LIMIT = {"type": "integer", "minimum": 1, "maximum": 100}
# since / until: checked and resolved by tools/time_range.py (dates, date-times, spans back from now).
TIME = {"type": "string", "minLength": 1, "maxLength": 40}
TIME_FIELD = {"type": "string", "enum": ["created", "updated"]}
SINCE_HELP = "ISO date/date-time (UTC if no offset) or span back: 30m, 36h, 7d, 2w"
UNTIL_HELP = "same forms; exclusive (a bare date includes that day)"

_SCHEMA = "kb_schema"

M = TypeVar("M")


def spec(fragment: Mapping[str, Any], description: str | None = None) -> dict[str, Any]:
    """Field metadata: the field's JSON-schema fragment, with an optional description."""
    schema = dict(fragment)
    if description is not None:
        schema["description"] = description
    return {_SCHEMA: schema}


def field(fragment: Mapping[str, Any], default: Any = dataclasses.MISSING, description: str | None = None) -> Any:
    """A model field: required when no default is given."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple or None as a field default")  # frozen models share defaults
    return dataclasses.field(default=default, metadata=spec(fragment, description))


def input_schema(model: type) -> dict[str, Any]:
    """The tool's inputSchema: an object with exactly the model's fields and no others."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(model):
        fragment = dict(f.metadata[_SCHEMA])
        if f.default is dataclasses.MISSING:
            required.append(f.name)
        elif f.default is not None and not isinstance(f.default, tuple):
            description = fragment.pop("description", None)
            fragment["default"] = f.default
            if description is not None:
                fragment["description"] = description
        properties[f.name] = fragment
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


# What an advertised schema keeps (tools/list, which agents pay for in tokens): what a call is written from.
# The rest (lengths, patterns, id bounds) stays in the full schema, which refuses a bad argument with an error
# naming the field and the rule in words (tools/validation.py): an agent learns a cap the one time it hits it.
_ADVERTISED = frozenset({"type", "enum", "default", "description", "required", "additionalProperties"})


def advertised_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema as tools/list publishes it: `_ADVERTISED` keywords, through properties and items, plus the
    upper bound of a defaulted integer (top, limit: a knob an agent turns, whose range it should know)."""
    lean = {key: value for key, value in schema.items() if key in _ADVERTISED}
    if schema.get("type") == "integer" and "default" in schema and "maximum" in schema:
        lean["maximum"] = schema["maximum"]
    if "properties" in schema:
        lean["properties"] = {name: advertised_schema(sub) for name, sub in schema["properties"].items()}
    if "items" in schema:
        lean["items"] = advertised_schema(schema["items"])
    return lean


class ArgumentParser(Generic[M]):
    """Validates raw arguments against a model's schema and builds the model (defaults filled in)."""

    def __init__(self, model: type[M]) -> None:
        self.model = model
        self.schema = input_schema(model)
        self.advertised = advertised_schema(self.schema)
        self._validator = ArgumentValidator(self.schema, PATTERN_RULES)
        kinds = {f.name: f.metadata[_SCHEMA].get("type") for f in dataclasses.fields(model)}  # type: ignore[arg-type]
        self._lists = {name for name, kind in kinds.items() if kind == "array"}
        self._integers = {name for name, kind in kinds.items() if kind == "integer"}

    def parse(self, raw: Any) -> M:
        """The model for `raw`, or InvalidArgument naming the first wrong field.

        An integer-valued float where an integer is expected (`"top": 5.0`, which some clients send) is that
        integer; any other float there is refused by the schema.
        """
        if isinstance(raw, dict):
            raw = {name: _integral(value) if name in self._integers else value for name, value in raw.items()}
        self._validator.check(raw)
        values = {name: tuple(value) if name in self._lists else value for name, value in raw.items()}
        return self.model(**values)


def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@dataclasses.dataclass(frozen=True)
class NoArguments:
    """The model of a tool that takes no arguments."""
