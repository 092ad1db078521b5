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
        title=spec.title,
        description=spec.description,
        input_schema=spec.input_schema,
        output_schema=spec.output_schema,
        # 2025-11-25 clients ask for a task only of a tool that says it may run as one (protocol/tasks.py);
        # the 2026-07-28 tools/list leaves the field out.
        execution=types.ToolExecution(task_support="optional") if tasks.supports(spec.name) else None,
        annotations=types.ToolAnnotations(
            read_only_hint=spec.read_only,
            destructive_hint=spec.destructive,
            idempotent_hint=spec.idempotent,
            open_world_hint=False,
        ),
    )


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
