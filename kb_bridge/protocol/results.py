"""Plain Python into MCP types, once: tool declarations and tool results (success and error)."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from kb_bridge.content.resources import MARKDOWN, document_uri
from kb_bridge.errors import KbError
from kb_bridge.tools import tasks
from kb_bridge.tools.links import DocumentLink
from kb_bridge.tools.spec import ToolSpec


def to_mcp_tool(spec: ToolSpec) -> types.Tool:
    return types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=spec.advertised_input_schema,
        output_schema=brief_output_schema(spec.output_schema),
        # 2025-11-25 clients ask for a task only of a tool that says it may run as one (protocol/tasks.py);
        # the 2026-07-28 tools/list leaves the field out.
        execution=types.ToolExecution(task_support="optional") if tasks.supports(spec.name) else None,
        annotations=tool_annotations(spec),
    )


def brief_output_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The output schema as tools/list publishes it: the result's top-level fields with their types, nested
    shapes (objects' fields, arrays' items) cut to their type. The full shapes stay the contract in code
    (tools/*.py, shapes.py; every result is checked against them in the tests); published whole they were 44 %
    of tools/list, context every agent pays for on every conversation, and a result that fits them still fits
    this (clients that validate structuredContent, as the TypeScript SDK does, keep passing).

    The `error` field an error result carries is left out: nothing here requires a field or forbids others,
    so `{"error": {...}}` validates without it (tests/test_schemas.py), and it would repeat in every tool."""
    brief = {key: value for key, value in schema.items() if key != "properties"}
    brief["properties"] = {name: _type_only(field) for name, field in schema.get("properties", {}).items()
                           if name != "error"}
    return brief


def _type_only(field: dict[str, Any]) -> dict[str, Any]:
    if "anyOf" in field:
        return {"anyOf": [_type_only(option) for option in field["anyOf"]]}
    return {"type": field["type"]}


def tool_annotations(spec: ToolSpec) -> types.ToolAnnotations:
    """The hints, each left out where the MCP default already says it (readOnlyHint false, idempotentHint
    false), and destructive/idempotent only for a tool that writes (the spec gives them meaning only there)."""
    if spec.read_only:
        return types.ToolAnnotations(read_only_hint=True, open_world_hint=False)
    return types.ToolAnnotations(destructive_hint=spec.destructive, idempotent_hint=spec.idempotent or None,
                                 open_world_hint=False)


def success_result(result: dict[str, Any], text: str, links: list[DocumentLink] | None = None) -> types.CallToolResult:
    """The text first (what the agent reads), then a resource_link per document the result points at, by
    the URI resources/read serves (content/resources.py: kb://document/{id}); structuredContent is the
    result as the output schema says, links or not."""
    content: list[types.ContentBlock] = [types.TextContent(type="text", text=text)]
    content.extend(resource_link(link) for link in links or ())
    return types.CallToolResult(content=content, structured_content=result)


def resource_link(link: DocumentLink) -> types.ResourceLink:
    return types.ResourceLink(
        type="resource_link",
        uri=document_uri(link.document_id),
        name=f"document-{link.document_id}",
        title=link.title or f"document {link.document_id}",
        mime_type=MARKDOWN,
    )


def error_result(error: KbError) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{error.code}: {error.message}")],
        structured_content={"error": error.to_dict()},
        is_error=True,
    )
