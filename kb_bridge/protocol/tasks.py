"""MCP tasks over the bridge's task logic (tools/tasks.py), in both eras (issue 38 item 2).

2026-07-28, the `io.modelcontextprotocol/tasks` extension (SEP-2663): a client that declares the extension in
a request's capabilities gets, for kb_addnote, kb_upload_finish and kb_update_note, a flat CreateTaskResult
(`resultType: "task"`); `tasks/get` answers the task's state and, once it is complete, the tool's result
inline (there is no `tasks/result` in this version: -32601); `tasks/cancel` acknowledges with an empty
result; `tasks/update` acknowledges too (no kb-bridge task asks for input). A request that did not declare
the extension is refused tasks/* with -32021 and runs its tools as before.

2025-11-25 (experimental tasks in the core protocol): a `tools/call` carrying `task` gets `{task: Task}`;
`tasks/get` answers the Task, `tasks/result` waits for the end (sending the job's stages as progress when
asked) and answers the tool's result, `tasks/cancel` answers the cancelled Task (or -32602 when the task
can no longer be cancelled). The capability is added to the initialize answer, and the three tools say
`execution.taskSupport: "optional"` (protocol/results.py).

A task-creating `tools/call` is answered by a server middleware: the SDK checks a 2025-era `tools/call`
answer against CallToolResult, which a CreateTaskResult is not (docs/protocol.md, "Tasks").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

import mcp_types as types
from mcp.server import Server
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field, ValidationError

from kb_bridge.errors import KbError
from kb_bridge.protocol.results import error_result, success_result
from kb_bridge.runtime import Bridge
from kb_bridge.tools import tasks
from kb_bridge.tools.links import document_links
from kb_bridge.tools.spec import Result, ToolContext, ToolSpec
from kb_bridge.tools.task_ids import MAX_ID_CHARS, TaskRef, decode, encode, task_key
from kb_bridge.tools.tasks import CANCELLED, COMPLETED, TaskState, UnknownTask

logger = logging.getLogger(__name__)

Ctx = ServerRequestContext[Any, Any]

EXTENSION = "io.modelcontextprotocol/tasks"
LEGACY_VERSION = "2025-11-25"  # the one handshake version with (experimental) tasks
RELATED_TASK = "io.modelcontextprotocol/related-task"
MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)
T = TypeVar("T")


class TaskParams(types.RequestParams):
    task_id: str = Field(alias="taskId")


class UpdateParams(TaskParams):
    input_responses: dict[str, Any] | None = Field(alias="inputResponses", default=None)


class Dispatcher(Protocol):
    """What tasks need of protocol/server.py's ToolDispatcher (a Protocol: server.py installs this module)."""

    def spec(self, name: str) -> ToolSpec | None: ...

    def tool_context(self, ctx: Ctx) -> ToolContext: ...

    async def invoke(
        self, ctx: Ctx, name: str, raw: dict[str, Any] | None, work: Callable[[ToolSpec, ToolContext, Any], tuple[Result, T]],
    ) -> tuple[ToolSpec, tuple[Result, T]] | KbError: ...


class TaskHandlers:
    """tasks/get, tasks/result, tasks/cancel, tasks/update, and the middleware that makes tasks."""

    def __init__(self, bridge: Bridge, dispatcher: Dispatcher, server: Server[Any]) -> None:
        self._bridge = bridge
        self._dispatcher = dispatcher
        self._server = server
        self._key = task_key(bridge.settings)

    def install(self) -> None:
        server = self._server
        server.extensions[EXTENSION] = {}
        server.add_request_handler("tasks/get", TaskParams, self.get)
        server.add_request_handler("tasks/cancel", TaskParams, self.cancel)
        server.add_request_handler("tasks/update", UpdateParams, self.update)
        server.add_request_handler("tasks/result", TaskParams, self.result)
        server.middleware.append(self.middleware)

    # --- making a task ----------------------------------------------------------------------------------------

    async def middleware(self, ctx: Ctx, call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call":
            created = await self._create(ctx)
            if created is not None:
                return created
        result = await call_next(ctx)
        if ctx.method == "initialize" and isinstance(result, dict) and result.get("protocolVersion") == LEGACY_VERSION:
            capabilities = result.setdefault("capabilities", {})
            capabilities["tasks"] = {"requests": {"tools": {"call": {}}}, "cancel": {}}
        return result

    async def _create(self, ctx: Ctx) -> dict[str, Any] | None:
        """The answer to a tools/call that asks for a task of a tool that can run as one, else None (the call
        goes on as usual)."""
        raw = ctx.params if isinstance(ctx.params, Mapping) else {}
        name = raw.get("name")
        modern = ctx.protocol_version in MODERN
        legacy_task = ctx.protocol_version == LEGACY_VERSION and isinstance(raw.get("task"), Mapping)
        if legacy_task and isinstance(name, str) and not tasks.supports(name) and self._dispatcher.spec(name) is not None:
            # 2025-11-25, tool-level negotiation: a tool without `execution.taskSupport` must not be called as a
            # task, and the server SHOULD answer -32601; running it would answer a CallToolResult to a client
            # waiting for a CreateTaskResult, after doing what it asked (a kb_delete deleting).
            raise MCPError(code=types.METHOD_NOT_FOUND, message=f"{name} cannot run as a task (its execution.taskSupport is forbidden)")
        if not isinstance(name, str) or not tasks.supports(name) or self._dispatcher.spec(name) is None:
            return None
        asked = _declared(ctx) if modern else legacy_task
        if not asked:
            return None
        try:
            params = types.CallToolRequestParams.model_validate(raw, by_name=False)
        except ValidationError:
            return None  # the usual path answers it with its usual error
        outcome = await self._dispatcher.invoke(ctx, name, params.arguments, tasks.start)
        if isinstance(outcome, KbError):  # it failed before any job existed: no task was made
            if not modern:
                # 2025-11-25: a requestor that asked for a task reads the answer as a CreateTaskResult (the
                # TypeScript SDK threw a schema error and the tool's message was lost); refusing the request is
                # the one other answer it reads, so the tool's error becomes a JSON-RPC error carrying it.
                raise _refusal(outcome)
            result = error_result(outcome).model_dump(by_alias=True, mode="json", exclude_none=True)
            return self._stamped(ctx, {**result, "resultType": "complete"})
        _spec, (_result, ref) = outcome
        task_id = encode(ref, self._key)
        state = tasks.made(ref)
        if modern:
            return self._stamped(ctx, {"resultType": "task", **_task(task_id, state, modern=True)})
        return {"task": _task(task_id, state, modern=False)}

    def _stamped(self, ctx: Ctx, result: dict[str, Any]) -> dict[str, Any]:
        """A short-circuited 2026-era answer carries the serverInfo stamp the SDK puts on every other one."""
        if ctx.protocol_version in MODERN:
            result["_meta"] = {**result.get("_meta", {}), types.SERVER_INFO_META_KEY: self._server.server_info_stamp}
        return result

    # --- the tasks/* methods ----------------------------------------------------------------------------------

    async def get(self, ctx: Ctx, params: TaskParams) -> dict[str, Any]:
        ref = self._ref(ctx, params)
        modern = ctx.protocol_version in MODERN
        state = await self._run(ctx, params.task_id, tasks.read, ref)
        answer = _task(params.task_id, state, modern)
        if modern and state.status == COMPLETED:
            answer["result"] = self._tool_result(ref, state)  # the tool's result inline (SEP-2663)
        return answer

    async def result(self, ctx: Ctx, params: TaskParams) -> dict[str, Any]:
        """2025-11-25: wait for the task's end, then the tool's result."""
        if ctx.protocol_version in MODERN:
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found", data="tasks/result")
        ref = self._ref(ctx, params)
        state = await self._run(ctx, params.task_id, tasks.wait, ref, self._bridge.settings.mcp.wait_seconds)
        if state.status == CANCELLED:
            raise MCPError(code=types.INVALID_PARAMS, message=f"task {params.task_id} was cancelled: it has no result")
        if state.status != COMPLETED:
            raise MCPError(code=types.INTERNAL_ERROR,
                           message=f"task {params.task_id} is still working ({state.message}); ask for its result again")
        answer = self._tool_result(ref, state)
        answer["_meta"] = {RELATED_TASK: {"taskId": params.task_id}}
        return answer

    async def cancel(self, ctx: Ctx, params: TaskParams) -> dict[str, Any]:
        ref = self._ref(ctx, params)
        state = await self._run(ctx, params.task_id, tasks.cancel, ref)
        if ctx.protocol_version in MODERN:
            return {}  # an empty acknowledgement, whatever became of it (SEP-2663): tasks/get tells
        if state.status == CANCELLED:
            return _task(params.task_id, state, modern=False)
        reason = "it has ended" if state.terminal else "its job is already running (the engine cannot stop it)"
        raise MCPError(code=types.INVALID_PARAMS, message=f"task {params.task_id} cannot be cancelled: {reason}")

    async def update(self, ctx: Ctx, params: UpdateParams) -> dict[str, Any]:
        if ctx.protocol_version not in MODERN:
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found", data="tasks/update")
        ref = self._ref(ctx, params)
        await self._run(ctx, params.task_id, tasks.read, ref)
        return {}  # no kb-bridge task waits for input: nothing to deliver

    # --- helpers ----------------------------------------------------------------------------------------------

    def _ref(self, ctx: Ctx, params: TaskParams) -> TaskRef:
        """The task an id names, for a caller that may ask: 2026-era requests must declare the extension
        (-32021), an id longer than any this bridge makes is refused before any other work (-32602), an
        `Mcp-Name` header must name the same task (-32020, SEP-2243), an id this configuration did not seal is
        unknown (-32602)."""
        if ctx.protocol_version in MODERN and not _declared(ctx):
            raise MCPError(
                code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                message=f"Client did not declare required extension {EXTENSION!r}",
                data={"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
            )
        if len(params.task_id) > MAX_ID_CHARS:
            raise MCPError(code=types.INVALID_PARAMS, message=f"unknown task: a task id has at most {MAX_ID_CHARS} characters")
        headers = getattr(ctx.request, "headers", None)
        named = headers.get("mcp-name") if headers is not None else None
        if named is not None and named.strip() != params.task_id:
            raise MCPError(code=types.HEADER_MISMATCH, message="the Mcp-Name header does not match params.taskId")
        ref = decode(params.task_id, self._key)
        if ref is None:
            raise _unknown(params.task_id)
        return ref

    async def _run(self, ctx: Ctx, task_id: str, step: Any, ref: TaskRef, *more: Any) -> TaskState:
        try:
            state: TaskState = await self._bridge.run(step, self._dispatcher.tool_context(ctx), ref, *more)
        except UnknownTask:
            raise _unknown(task_id) from None
        except KbError as exc:  # the engine failed: a protocol error (the task itself may be fine); ask again
            logger.warning("task of %s (job %s) could not be read: %s", ref.tool, ref.job_id, exc.code)
            raise MCPError(code=types.INTERNAL_ERROR, message=f"the task could not be read: {exc.code}: {exc.message}") from None
        except Exception:
            logger.exception("task of %s (job %s) failed unexpectedly", ref.tool, ref.job_id)
            raise MCPError(code=types.INTERNAL_ERROR, message="an internal error occurred; it has been logged") from None
        return state

    def _tool_result(self, ref: TaskRef, state: TaskState) -> dict[str, Any]:
        """The CallToolResult the tool would have answered, as a wire dict."""
        if state.error is not None:
            result = error_result(state.error)
        else:
            spec = self._dispatcher.spec(ref.tool)
            value = state.result or {}
            text = spec.render(value) if spec is not None else ""
            result = success_result(value, text, document_links(ref.tool, value))
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def _declared(ctx: Ctx) -> bool:
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.extensions and EXTENSION in capabilities.extensions)


def _refusal(error: KbError) -> MCPError:
    """A tool's error as a JSON-RPC error: -32602 for the caller's fault (a KbError answered 4xx on the web: an
    argument, a missing note), -32603 for the rest; its data is the tool's error (to_dict), code included, as
    a plain call's error result carries it (protocol/results.py error_result)."""
    caller = error.http_status < 500
    return MCPError(code=types.INVALID_PARAMS if caller else types.INTERNAL_ERROR,
                    message=f"{error.code}: {error.message}", data=error.to_dict())


def _unknown(task_id: str) -> MCPError:
    return MCPError(code=types.INVALID_PARAMS, message=f"unknown task: {task_id[:40]}…" if len(task_id) > 40 else f"unknown task: {task_id}")


def _task(task_id: str, state: TaskState, modern: bool) -> dict[str, Any]:
    """The Task fields of either era (2026: ttlMs/pollIntervalMs; 2025-11-25: ttl/pollInterval, and a tool
    error is `failed`). A task lives as long as the engine keeps its job: no ttl (null)."""
    status = state.status
    if not modern and state.error is not None:
        status = "failed"
    task: dict[str, Any] = {"taskId": task_id, "status": status, "statusMessage": state.message,
                            "createdAt": state.created_at, "lastUpdatedAt": state.updated_at}
    if modern:
        task.update(ttlMs=None, pollIntervalMs=tasks.POLL_INTERVAL_MS)
    else:
        task.update(ttl=None, pollInterval=tasks.POLL_INTERVAL_MS)
    return task
