"""Hypothesis strategies for hostile inputs: arbitrary JSON, unicode edge cases, and tool
arguments that are sometimes right, sometimes wrong in type, size or shape."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

# Characters that break naive code: NUL, controls, bidi overrides, surrogates-adjacent, combining.
EDGE_TEXT = st.sampled_from(
    ["", " ", "\x00", "\r\n", "\u202e", "\ufeff", "../../etc/passwd", "%2F", "collection:memory", "a" * 5000,
     "\U0001f600" * 50, "\u0301" * 10, "Robert'); DROP TABLE documents;--", "{{7*7}}", "\\u0000", "null", "1e309"]
)
TEXT = st.one_of(st.text(max_size=300), EDGE_TEXT)
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2**31, 2**53, 2**53 + 1, 10**12, 1.5, -0.0]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
JSON = st.recursive(SCALARS, lambda children: st.one_of(st.lists(children, max_size=5), st.dictionaries(TEXT, children, max_size=5)), max_leaves=20)


def value_for(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A value of roughly the schema's type (often out of range or malformed) or anything at all."""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    shaped: list[st.SearchStrategy[Any]] = []
    if "integer" in kinds:
        shaped.append(NUMBERS)
    if "string" in kinds:
        shaped.append(st.one_of(TEXT, st.sampled_from(schema.get("enum", []) or ["x"])))
    if "boolean" in kinds:
        shaped.append(st.booleans())
    if "array" in kinds:
        shaped.append(st.lists(st.one_of(TEXT, SCALARS), max_size=30))
        shaped.append(st.just(["t"] * 100_000))
    return st.one_of(*shaped, JSON) if shaped else JSON


def arguments_for(schema: dict[str, Any], dict_only: bool = False) -> st.SearchStrategy[Any]:
    """Tool arguments: a dict over the schema's properties (each present or not) plus stray keys,
    or (unless `dict_only`) sometimes not a dict at all."""
    properties: dict[str, Any] = schema.get("properties", {})
    fields = {name: value_for(prop) for name, prop in properties.items()}
    as_dict = st.fixed_dictionaries({}, optional=fields).flatmap(
        lambda base: st.dictionaries(TEXT, JSON, max_size=2).map(lambda extra: {**extra, **base})
    )
    return as_dict if dict_only else st.one_of(as_dict, as_dict, as_dict, JSON)
