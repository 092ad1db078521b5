"""Tool-argument validation against each tool's input schema, with errors that name the field.

The low-level MCP server does not validate arguments, so this runs before every handler. Each
schema is compiled once; only the first error is built (lazily), so a huge invalid argument
costs no more than finding its first fault. Messages never echo the offending value.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

from kb_bridge import json_values
from kb_bridge.errors import InvalidArgument

_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "a list",
    "object": "an object",
    "null": "null",
}


def _ecma_pattern(validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    """`pattern` as JSON Schema means it (ECMA-262, no flags), where `$` is the end of the string. Python's `$`
    also matches before a final newline, and jsonschema's own `pattern` uses it as is: every pattern anchored so
    took a value ending in one ("memory\\n" as a collection name, a title or tag ending in a newline as text
    without control characters), and the newline went on to the engine and into stored titles."""
    if validator.is_type(instance, "string") and not _compiled(pattern).search(instance):
        yield ValidationError(f"does not match {pattern!r}")


@functools.lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    # A final unescaped `$` is the only one the tools' patterns hold (tools/arguments.py): there it is `\Z`.
    return re.compile(re.sub(r"(?<!\\)\$$", r"\\Z", pattern))


_Validator = validators.extend(Draft202012Validator, {"pattern": _ecma_pattern})


class ArgumentValidator:
    """Validates the arguments of one tool."""

    def __init__(self, schema: Mapping[str, Any], rules: Mapping[str, str] | None = None) -> None:
        """`rules` says in words what a `pattern` means ("1-64 lower-case letters, …"): a value that breaks a
        patterned field's pattern or length is told that rule rather than "not allowed"."""
        Draft202012Validator.check_schema(schema)
        self._validator = _Validator(schema)
        self._known = sorted(schema.get("properties", {}))
        self._rules = dict(rules or {})

    def check(self, arguments: Any) -> None:
        """Raise `InvalidArgument` for the first problem found, or return."""
        unstorable = _unstorable_string(arguments)
        if unstorable is not None:
            field, problem = unstorable
            raise InvalidArgument(field or "arguments", problem)
        error = next(iter(self._validator.iter_errors(arguments)), None)
        if error is not None:
            field, problem = self._explain(error)
            raise InvalidArgument(field, problem)

    def _explain(self, error: ValidationError) -> tuple[str, str]:
        field = json_values.path(error.absolute_path)
        # Errors from iter_errors always carry the keyword and its value (Unset only on hand-made ones).
        keyword, expected = str(error.validator), error.validator_value
        instance = error.instance
        if keyword == "required":
            missing = [name for name in (expected if isinstance(expected, list) else []) if isinstance(instance, dict) and name not in instance]
            return _join(field, missing[0] if missing else "?"), "is required"
        if keyword == "additionalProperties":
            extra = sorted(set(instance) - set(self._known)) if isinstance(instance, dict) and not field else []
            name = extra[0] if extra else "?"
            return _join(field, name), f"is not an argument of this tool (expected: {', '.join(self._known)})"
        subschema = error.schema if isinstance(error.schema, Mapping) else {}
        rule = self._rules.get(str(subschema.get("pattern")))
        # A length error is told the rule only when the rule states that length (a collection name's "1-64
        # characters"): one pattern serves fields of several lengths (titles 500, tags 200), whose rule says
        # nothing of them, and a 501-character title was told "must be text without control characters".
        if rule is not None and (keyword == "pattern" or (keyword in ("maxLength", "minLength")
                                                          and re.search(rf"\b{expected}\b", rule))):
            return field or "arguments", f"must be {rule}"
        return field or "arguments", _problem(keyword, expected)


# A lone surrogate (U+D800-U+DFFF unpaired) is what bytes that are not UTF-8 become when read as text with
# surrogateescape (a command line's argv and stdin) or what a JSON "\ud800" escape gives. UTF-8 cannot
# encode one, so no engine request or store can carry it: refused here, naming the field, as NUL is.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def unstorable(value: str) -> str | None:
    """Why no store can keep `value`, or None (the tools' arguments and the prompts' share this rule)."""
    if "\x00" in value:
        # No store keeps it (PostgreSQL text cannot, and the engine refuses it on SQLite too).
        return "must not contain the NUL character (U+0000)"
    if not value.isascii() and _LONE_SURROGATE.search(value):
        return ("must be UTF-8 text: it holds a lone surrogate (U+D800-U+DFFF), as bytes that are not UTF-8 "
                "do once read as text")
    return None


def _unstorable_string(arguments: Any) -> tuple[str, str] | None:
    """(the path of the first string no store can keep, why), or None: checked for every string argument,
    before any engine call (json_values.strings: memory grows with the depth, not with the values)."""
    for keys, text, is_key in json_values.strings(arguments):
        if not is_key:
            problem = unstorable(text)
            if problem is not None:
                return json_values.path(keys), problem
    return None


def _problem(keyword: str, expected: Any) -> str:
    if keyword == "type":
        kinds = expected if isinstance(expected, list) else [expected]
        return "must be " + " or ".join(_TYPE_NAMES.get(str(k), str(k)) for k in kinds)
    if keyword == "minimum":
        return f"must be at least {expected}"
    if keyword == "maximum":
        return f"must be at most {expected}"
    if keyword == "minLength":
        return "must not be empty" if expected == 1 else f"must be at least {expected} characters long"
    if keyword == "maxLength":
        return f"must be at most {expected} characters long"
    if keyword == "minItems":
        return f"must have at least {expected} items"
    if keyword == "maxItems":
        return f"must have at most {expected} items"
    if keyword == "enum":
        return "must be one of: " + ", ".join(str(v) for v in expected)
    if keyword == "pattern":
        return "contains characters or a format that is not allowed"
    return f"is invalid ({keyword})"


def _join(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name
