"""The tool registry: every tool kb-bridge offers, declared once, and the selection rules."""

from __future__ import annotations

from kb_bridge.errors import Forbidden, SettingsError
from kb_bridge.settings import McpSettings
from kb_bridge.tools import browse, documents, notes, related, search, status, uploads
from kb_bridge.tools.spec import Result, ToolContext, ToolSpec

ALL_TOOLS: tuple[ToolSpec, ...] = (
    *search.TOOLS,
    *notes.TOOLS,
    *documents.TOOLS,
    *browse.TOOLS,
    *related.TOOLS,
    *uploads.TOOLS,
    *status.TOOLS,
)


def select(settings: McpSettings, available: tuple[ToolSpec, ...] = ALL_TOOLS) -> list[ToolSpec]:
    """The tools to offer: the KB_MCP_TOOLS allow-list if set, minus writers in read-only mode."""
    names = {tool.name for tool in available}
    if settings.tools is not None:
        unknown = sorted(set(settings.tools) - names)
        if unknown:
            raise SettingsError("KB_MCP_TOOLS", f"unknown tool(s): {', '.join(unknown)}")
    return [
        tool
        for tool in available
        if (settings.tools is None or tool.name in settings.tools) and (tool.read_only or not settings.read_only)
    ]


def call(
    ctx: ToolContext, name: str, arguments: dict[str, object], available: tuple[ToolSpec, ...] = ALL_TOOLS
) -> Result:
    """Run one tool of `available` by name as its handler runs for an agent (the console and the command
    line for people): FORBIDDEN without the tool's scope, arguments parsed and validated by its model."""
    spec = next(spec for spec in available if spec.name == name)
    if not ctx.principal.can(spec.scope):
        raise Forbidden(f"this token lacks the {spec.scope} scope that {spec.name} needs", scope=spec.scope)
    return spec.handler(ctx, spec.parse(arguments))
