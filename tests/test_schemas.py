"""The published tool schemas: portable (what MCP Inspector's tools/list check flags: type arrays, bare
booleans, schemas that constrain nothing, remote $refs), and every error result valid against its tool's
outputSchema (the TypeScript SDK client validates structuredContent even when isError is true)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from kb_bridge import errors
from kb_bridge.protocol.results import error_result, to_mcp_tool
from kb_bridge.testing.schema_rules import findings
from kb_bridge.tools import registry

TOOLS = {spec.name: spec for spec in registry.ALL_TOOLS}
def test_the_checker_reports_what_inspector_reports() -> None:
    assert list(findings({"type": "object", "properties": {"a": {"type": ["string", "null"]}, "b": {}}})) == [
        ".properties.a: type union ['string', 'null']", ".properties.b: constrains nothing"]


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_every_tool_schema_is_portable(name: str) -> None:
    tool = to_mcp_tool(TOOLS[name]).model_dump(by_alias=True, mode="json", exclude_none=True)
    assert list(findings(tool["inputSchema"], "inputSchema")) == []
    assert list(findings(tool["outputSchema"], "outputSchema")) == []


ERRORS = [
    errors.InvalidArgument("top", "must be at most 50"),
    errors.NotFound("document 9 not found"),
    errors.Conflict("changed", current_version=4),
    errors.UploadIncomplete("missing chunks", missing=[1, 2], received_bytes=10),
    errors.OutcomeUnknown(),
    errors.KbError("an internal error occurred; it has been logged"),
]


@pytest.mark.parametrize("name", sorted(TOOLS))
@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_an_error_result_validates_against_the_tools_output_schema(name: str, error: errors.KbError) -> None:
    result = error_result(error)
    Draft202012Validator(TOOLS[name].output_schema).validate(result.structured_content)
    assert result.is_error and result.content[0].text.startswith(f"{error.code}: ")  # type: ignore[union-attr]


def _top_types(field: dict[str, Any]) -> set[str]:
    if "anyOf" in field:
        return set().union(*(_top_types(option) for option in field["anyOf"]))
    return {field["type"]}


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_the_published_output_schema_is_the_full_ones_top_level(name: str) -> None:
    """tools/list carries each result's fields with their types, nested shapes cut to their type: the same
    fields (but the error result's `error`), the same required ones, the same types, so every result the full
    shape accepts fits it too, error results included."""
    full = TOOLS[name].output_schema
    published = to_mcp_tool(TOOLS[name]).model_dump(by_alias=True, mode="json", exclude_none=True)["outputSchema"]
    assert published.get("required") == full.get("required") and published["type"] == "object"
    assert "additionalProperties" not in published  # what lets an error result's `error` through
    assert set(published["properties"]) == set(full["properties"]) - {"error"}
    for field, schema in published["properties"].items():
        assert _top_types(schema) == _top_types(full["properties"][field]), field
        assert not {"properties", "items"} & set(schema)  # nested shapes are not repeated
    for error in ERRORS:
        Draft202012Validator(published).validate(error_result(error).structured_content)


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_the_annotations_keep_their_meaning_with_defaults_left_out(name: str) -> None:
    """Read by the MCP defaults (readOnlyHint false, destructiveHint true, idempotentHint false,
    openWorldHint true), the published hints say what the tool's spec says."""
    spec = TOOLS[name]
    hints = to_mcp_tool(spec).model_dump(by_alias=True, mode="json", exclude_none=True)["annotations"]
    assert hints.get("readOnlyHint", False) is spec.read_only and hints["openWorldHint"] is False
    if not spec.read_only:
        assert hints.get("destructiveHint", True) is spec.destructive
        assert hints.get("idempotentHint", False) is spec.idempotent


def _kept(advertised: Any, full: Any, path: str = "") -> None:
    """Every keyword of the advertised schema is the full schema's own, with the same value (it only leaves
    keywords out), so whatever the full schema accepts, the advertised one accepts too."""
    assert isinstance(advertised, dict) and isinstance(full, dict), path
    for key, value in advertised.items():
        assert key in full, f"{path}.{key}"
        if key in ("properties", "items"):
            subs = value if key == "properties" else {"": value}
            fulls = full[key] if key == "properties" else {"": full[key]}
            assert set(subs) == set(fulls), path
            for name in subs:
                _kept(subs[name], fulls[name], f"{path}.{key}.{name}")
        else:
            assert value == full[key], f"{path}.{key}"


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_the_advertised_input_schema_is_the_full_one_with_caps_and_patterns_left_out(name: str) -> None:
    """tools/list publishes what a call is written from (names, types, enums, defaults, required, no other
    fields); the lengths, patterns and id bounds stay in the full schema that validates every call."""
    spec = TOOLS[name]
    published = to_mcp_tool(spec).model_dump(by_alias=True, mode="json", exclude_none=True)["inputSchema"]
    full = spec.input_schema
    _kept(published, full)
    assert published.get("required") == full.get("required") and published["additionalProperties"] is False
    for field, schema in full["properties"].items():
        lean = published["properties"][field]
        assert (lean["type"], lean.get("enum"), lean.get("default")) == (schema["type"], schema.get("enum"), schema.get("default"))
        assert not {"pattern", "minLength", "maxLength", "maxItems"} & set(lean), field



def _described(name: str) -> str:
    tool = to_mcp_tool(TOOLS[name]).model_dump(by_alias=True, mode="json", exclude_none=True)
    return " ".join([tool["description"], *(p.get("description", "") for p in tool["inputSchema"]["properties"].values())])


@pytest.mark.parametrize(("name", "guidance"), [
    ("kb_search", ["2-3 phrasings", "merge by chunk_id", "rerank by reading", "memory, documents"]),
    ("kb_addnote", ["memory for agent memory", "Update a stale note with kb_update_note instead of adding one"]),
    ("kb_update_note", ["move it to another collection", "expected_version"]),
    ("kb_upload_start", ["kb_upload_chunk", "kb_upload_finish"]),
])
def test_the_lean_tool_list_keeps_the_guidance_agents_need(name: str, guidance: list[str]) -> None:
    """Trimmed for size, the descriptions still say how to search well (several phrasings, merged, reranked by
    reading), which collection to use, to update a stale note rather than add one, and the upload steps."""
    described = _described(name)
    assert [phrase for phrase in guidance if phrase not in described] == []


TOOLS_LIST_BUDGET = 12_000  # characters of tools/list for all tools (issue 38); agents pay for it in tokens


@pytest.mark.anyio
async def test_tools_list_for_all_tools_stays_within_its_budget(client: Any) -> None:
    """Measured as `kb-bridge tools` measures it, on what the server answers (both eras: the 2025-11-25 answer
    also carries the task-support field)."""
    listed = (await client.list_tools()).tools
    assert {tool.name for tool in listed} == set(TOOLS)
    size = len(json.dumps({"tools": [tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in listed]}))
    assert size <= TOOLS_LIST_BUDGET, size
