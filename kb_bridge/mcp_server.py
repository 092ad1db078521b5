"""The MCP layer: a low-level `mcp` Server whose tool calls run the sync handlers on a bounded
thread pool. The only module (with app.py and stdio.py) that imports `mcp`.

Here, once, arguments are validated against the tool's input schema, `KbError`s become
`is_error` results with a stable code, and unexpected exceptions are logged with their
traceback and reported as INTERNAL_ERROR without any detail.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from typing import Any

import mcp_types as types
from asgiref.sync import async_to_sync
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from kb_bridge import __version__, context, tools
from kb_bridge.errors import KbError
from kb_bridge.mcp_content import ContentHandlers
from kb_bridge.runtime import Bridge
from kb_bridge.tools.spec import Arguments, ProgressFn, Result, ToolContext, ToolSpec
from kb_bridge.validation import ArgumentValidator

logger = logging.getLogger(__name__)

CALLER_SCOPE_KEY = "kb.caller"
LOCAL_CALLER = "local"

INSTRUCTIONS = (
    "A knowledge base of documents and agent memory, separated by collections "
    "(documents: the user's files and notes; memory: what you learn about the user and the work). "
    "Search before answering from memory; save durable facts with kb_addnote collection=memory; "
    "update a stale note with kb_update_note rather than adding a duplicate."
)


def to_mcp_tool(spec: ToolSpec) -> types.Tool:
    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=spec.input_schema,
        output_schema=spec.output_schema,
        annotations=types.ToolAnnotations(
            read_only_hint=spec.read_only,
            destructive_hint=spec.destructive,
            idempotent_hint=spec.idempotent,
            open_world_hint=False,
        ),
    )


def error_result(error: KbError) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{error.code}: {error.message}")],
        structured_content={"error": error.to_dict()},
        is_error=True,
    )


def caller_of(ctx: ServerRequestContext[Any, Any]) -> str:
    """The id the auth middleware put on the HTTP request; stdio and in-process calls are local."""
    request = ctx.request
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict):
        return str(scope.get(CALLER_SCOPE_KEY, LOCAL_CALLER))
    return LOCAL_CALLER


class ToolDispatcher:
    """tools/list and tools/call over one list of ToolSpecs."""

    def __init__(self, bridge: Bridge, specs: list[ToolSpec]) -> None:
        self._bridge = bridge
        self._specs = {spec.name: spec for spec in specs}
        # Built once: schemas compile once, and tools/list is a constant answer.
        self._validators = {spec.name: ArgumentValidator(spec.input_schema) for spec in specs}
        self._listing = types.ListToolsResult(tools=[to_mcp_tool(spec) for spec in specs])

    def input_schema(self, name: str) -> dict[str, Any] | None:
        spec = self._specs.get(name)
        return spec.input_schema if spec else None

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return self._listing

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        spec = self._specs.get(params.name)
        if spec is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name[:100]}")
        caller = caller_of(ctx)
        started = time.perf_counter()
        trail: list[str] = []
        context.engine_trail.set(trail)
        # DEBUG: the success or error line that follows carries the same fields and the outcome.
        logger.debug("mcp_tool_invoke", extra={"fields": {"event": "mcp_tool_invoke", "tool": spec.name, "caller": caller}})
        try:
            arguments = params.arguments if params.arguments is not None else {}
            self._validators[spec.name].check(arguments)
            tool_ctx = ToolContext(
                engine=self._bridge.engine,
                uploads=self._bridge.uploads,
                settings=self._bridge.settings,
                caller=caller,
                progress=self._progress_sink(ctx),
            )
            result, text = await self._bridge.run(_handle_and_render, spec, tool_ctx, dict(arguments))
        except KbError as exc:
            self._log_outcome(spec.name, caller, started, trail, exc.code)
            return error_result(exc)
        except Exception:
            logger.exception("tool %s failed unexpectedly", spec.name)
            self._log_outcome(spec.name, caller, started, trail, "INTERNAL_ERROR")
            return error_result(KbError("an internal error occurred; it has been logged"))
        self._log_outcome(spec.name, caller, started, trail, "ok", result)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=result)

    @staticmethod
    def _progress_sink(ctx: ServerRequestContext[Any, Any]) -> ProgressFn:
        """A sync progress reporter for the handler's thread, built on first use (most calls
        report none). report_progress is a no-op when the client asked for no progress."""
        report: list[Callable[..., Any]] = []

        def progress(value: float, total: float | None = None, message: str | None = None) -> None:
            if not report:
                report.append(async_to_sync(ctx.session.report_progress))
            try:
                report[0](value, total, message)
            except Exception:  # a client that went away must not fail the work itself
                logger.debug("progress notification could not be sent", exc_info=True)

        return progress

    def _log_outcome(
        self, tool: str, caller: str, started: float, trail: list[str], outcome: str, result: dict[str, Any] | None = None
    ) -> None:
        duration_ms = round((time.perf_counter() - started) * 1000, 2)
        fields: dict[str, Any] = {"tool": tool, "caller": caller, "duration_ms": duration_ms, "outcome": outcome}
        if trail:
            # What the engine answered, attempt by attempt (HTTP status or transport error).
            fields["engine_status"] = trail
        if outcome == "ok":
            fields["event"] = "mcp_tool_success"
            fields["result_count"] = _result_count(result or {})
        else:
            fields["event"] = "mcp_tool_error"
            fields["code"] = outcome
        access = context.access_fields.get()
        if access is not None:
            access.update(fields)  # the HTTP app writes it, with the status, as the request's one line
        elif outcome == "ok":
            logger.info("mcp_tool_success", extra={"fields": fields})
        else:
            logger.warning("mcp_tool_error", extra={"fields": fields})
        self._bridge.metrics.tool_call(tool, outcome, duration_ms / 1000)


def _handle_and_render(spec: ToolSpec, ctx: ToolContext, arguments: Arguments) -> tuple[Result, str]:
    """The handler and its text rendering, both on the pool thread: rendering a page of search
    results is string work that would otherwise hold up the event loop for every other request."""
    result = spec.handler(ctx, arguments)
    return result, spec.render(result)


def _result_count(result: dict[str, Any]) -> int:
    for key in ("results", "documents", "jobs"):
        if isinstance(result.get(key), list):
            return len(result[key])
    return 1


def build_server(bridge: Bridge, available: tuple[ToolSpec, ...] = tools.ALL_TOOLS) -> Server[Any]:
    """The MCP server for this bridge: tools selected from `available` by the settings; the
    bridge's resources live as long as the server runs (its lifespan)."""
    dispatcher = ToolDispatcher(bridge, tools.select(bridge.settings.mcp, available))
    content = ContentHandlers(bridge)
    with warnings.catch_warnings():
        # logging/setLevel is deprecated in 2026-07-28 but still sent by handshake-era clients.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server: Server[Any] = Server(
            "kb-bridge",
            version=__version__,
            title="kb-bridge",
            instructions=INSTRUCTIONS,
            lifespan=bridge.lifespan,
            get_tool_input_schema=dispatcher.input_schema,
            on_list_tools=dispatcher.list_tools,
            on_call_tool=dispatcher.call_tool,
            on_list_resources=content.list_resources,
            on_list_resource_templates=content.list_resource_templates,
            on_read_resource=content.read_resource,
            on_list_prompts=content.list_prompts,
            on_get_prompt=content.get_prompt,
            on_completion=content.complete,
            on_set_logging_level=content.set_logging_level,
        )
    if not bridge.settings.mcp.otel:
        server.middleware = [m for m in server.middleware if type(m).__name__ != "OpenTelemetryMiddleware"]
    return server
