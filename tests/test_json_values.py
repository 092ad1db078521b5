"""The walk both programs check a body's strings with (kb_bridge/json_values.py)."""

from __future__ import annotations

from typing import Any

from kb_bridge import json_values


def walked(value: Any) -> list[tuple[str, str, bool]]:
    return [(json_values.path(keys), text, is_key) for keys, text, is_key in json_values.strings(value)]


def test_every_string_comes_with_the_keys_that_lead_to_it_keys_included() -> None:
    body = {"tags": ["a", 7, {"title": "t", "empty": [], "none": {}}], "query": "q"}

    assert walked(body) == [
        ("tags", "tags", True), ("tags[0]", "a", False), ("tags[2].title", "title", True),
        ("tags[2].title", "t", False), ("tags[2].empty", "empty", True), ("tags[2].none", "none", True),
        ("query", "query", True), ("query", "q", False),
    ]


def test_a_lone_string_and_values_without_strings() -> None:
    assert walked("just text") == [("", "just text", False)]
    assert walked([1, 2.5, None, True, [], {}]) == []


def test_nesting_deeper_than_the_interpreter_recurses_is_walked_to_the_bottom() -> None:
    depth = 50_000
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]

    found = [(list(keys), text, is_key) for keys, text, is_key in json_values.strings(value)]

    assert found == [([0] * depth, "bottom", False)]
