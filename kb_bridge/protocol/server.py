"""The MCP server: a low-level `mcp` Server whose tool calls run the sync handlers on a bounded thread
pool.

Here, once, raw arguments are parsed into the tool's typed model (validated, errors naming the field),
`KbError`s become `is_error` results with a stable code, and unexpected exceptions are logged with their
traceback and reported as INTERNAL_ERROR without any detail.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import mcp_types as types
from asgiref.sync import async_to_sync
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from kb_bridge import __version__
from kb_bridge.tools import registry as tools
from kb_bridge.access_log import ToolCall
from kb_bridge.protocol.caller import request_principal
from kb_bridge.errors import Forbidden, KbError
from kb_bridge.protocol.content import ContentHandlers
from kb_bridge.protocol.paging import refuse_cursor
from kb_bridge.protocol.results import error_result, success_result, to_mcp_tool
from kb_bridge.protocol.tasks import TaskHandlers
from kb_bridge.runtime import Bridge
from kb_bridge.tools.links import document_links
from kb_bridge.tools.spec import ProgressFn, Result, ToolContext, ToolSpec

logger = logging.getLogger(__name__)

INSTRUCTIONS = (
    "A knowledge base of documents and agent memory, separated by collections "
    "(documents: the user's files and notes; memory: what you learn about the user and the work). "
    "Search before answering from memory; save durable facts with kb_addnote collection=memory; "
    "update a stale note with kb_update_note rather than adding a duplicate."
)

Ctx = ServerRequestContext[Any, Any]
T = TypeVar("T")


class ToolDispatcher:
    """tools/list and tools/call over one list of ToolSpecs."""

    def __init__(self, bridge: Bridge, specs: list[ToolSpec]) -> None:
        self._bridge = bridge
        self._specs = {spec.name: spec for spec in specs}
        self._tools = [(spec.scope, to_mcp_tool(spec)) for spec in specs]
        # Built once per set of scopes: tools/list is a constant answer for each.
        self._listings: dict[frozenset[str], types.ListToolsResult] = {}

    def input_schema(self, name: str) -> dict[str, Any] | None:
        spec = self._specs.get(name)
        return spec.input_schema if spec else None

    async def list_tools(self, ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        """The tools the caller's scopes allow (all of them for a full-access token), in one page."""
        refuse_cursor(params)
        scopes = request_principal(ctx).scopes
        listing = self._listings.get(scopes)
        if listing is None:
            listing = types.ListToolsResult(tools=[tool for scope, tool in self._tools if scope in scopes])
            self._listings[scopes] = listing
        return listing

    def spec(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    async def call_tool(self, ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        outcome = await self.invoke(ctx, params.name, params.arguments, _handle_and_render)
        if isinstance(outcome, KbError):
            return error_result(outcome)
        spec, (result, text) = outcome
        return success_result(result, text, document_links(spec.name, result))

    async def invoke(
        self, ctx: Ctx, name: str, raw: dict[str, Any] | None, work: Callable[[ToolSpec, ToolContext, Any], tuple[Result, T]],
    ) -> tuple[ToolSpec, tuple[Result, T]] | KbError:
        """Run `work` for the named tool on the pool as every tool call runs (scope check, parsed arguments,
        one access line and metric), or the call's error, for the caller to answer as its request needs (a
        plain call's error result; a task request's, protocol/tasks.py). `work` is the handler and its
        rendering for a plain call, or a task's first part."""
        spec = self._specs.get(name)
        if spec is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name[:100]}")
        principal = request_principal(ctx)
        call = ToolCall(spec.name, principal.name)
        try:
            if not principal.can(spec.scope):
                # The HTTP door answers 403 first; this keeps the rule for any other way in.
                raise Forbidden(f"this token lacks the {spec.scope} scope that {spec.name} needs", scope=spec.scope)
            arguments = spec.parse(raw if raw is not None else {})
            value = await self._bridge.run(work, spec, self.tool_context(ctx), arguments)
        except KbError as exc:
            self._finish(call, exc.code)
            return exc
        except Exception:
            logger.exception("tool %s failed unexpectedly", spec.name)
            self._finish(call, "INTERNAL_ERROR")
            return KbError("an internal error occurred; it has been logged")
        self._finish(call, "ok", value[0])
        return spec, value

    def tool_context(self, ctx: Ctx) -> ToolContext:
        """What a handler may use for this request: the bridge's parts, the caller, a progress sink."""
        return ToolContext(
            engine=self._bridge.engine,
            uploads=self._bridge.uploads,
            settings=self._bridge.settings,
            principal=request_principal(ctx),
            progress=self._progress_sink(ctx),
        )

    def _finish(self, call: ToolCall, outcome: str, result: Result | None = None) -> None:
        seconds = call.finish(outcome, _result_count(result) if result is not None else None)
        self._bridge.metrics.tool_call(call.tool, outcome, seconds)

    @staticmethod
    def _progress_sink(ctx: Ctx) -> ProgressFn:
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


def _handle_and_render(spec: ToolSpec, ctx: ToolContext, arguments: Any) -> tuple[Result, str]:
    """The handler and its text rendering, both on the pool thread: rendering a page of search
    results is string work that would otherwise hold up the event loop for every other request.
    Every engine request of the call shares one deadline (EngineSettings.call_deadline)."""
    with ctx.engine.deadline(ctx.settings.engine.call_deadline()):
        result = spec.handler(ctx, arguments)
    return result, spec.render(result)


def _result_count(result: Result) -> int:
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
    TaskHandlers(bridge, dispatcher, server).install()
    return server
