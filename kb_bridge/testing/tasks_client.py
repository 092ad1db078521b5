"""The client side of the 2026-07-28 tasks extension (io.modelcontextprotocol/tasks), on the official Python
SDK's extension interface (mcp.client.extension): a claim for `resultType: "task"` whose resolver polls
tasks/get until the task ends, and the raw tasks/* requests the tests send themselves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from pydantic import ConfigDict, Field, TypeAdapter

EXTENSION = "io.modelcontextprotocol/tasks"
_ANY = TypeAdapter(dict[str, Any])


class CreatedTask(types.Result):
    """A CreateTaskResult: the Task fields, flat."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str
    created_at: str = Field(alias="createdAt")
    last_updated_at: str = Field(alias="lastUpdatedAt")
    ttl_ms: int | None = Field(alias="ttlMs")
    poll_interval_ms: int | None = Field(alias="pollIntervalMs", default=None)


class _TaskRequest(types.Request[dict[str, Any], str]):
    pass


async def task_request(session: ClientSession, method: str, task_id: str, **params: Any) -> dict[str, Any]:
    request = _TaskRequest(method=method, params={"taskId": task_id, **params})
    return dict(await session.send_request(request, _ANY))  # type: ignore[type-var]  # a raw dict answer, on purpose


async def until_ended(session: ClientSession, task_id: str, timeout: float = 60) -> dict[str, Any]:
    with anyio.fail_after(timeout):
        while True:
            task = await task_request(session, "tasks/get", task_id)
            if task["status"] in ("completed", "failed", "cancelled"):
                return task
            await anyio.sleep((task.get("pollIntervalMs") or 200) / 1000)


class TasksExtension(ClientExtension):
    identifier = EXTENSION

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve)]

    async def _resolve(self, created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        task = await until_ended(ctx.session, created.task_id)
        if task["status"] != "completed":
            raise RuntimeError(f"task {created.task_id} ended {task['status']}: {task.get('error')}")
        return types.CallToolResult.model_validate(task["result"])


async def create_task(client: Client, tool: str, arguments: dict[str, Any], **options: Any) -> CreatedTask:
    """Call a tool and keep the task handle instead of resolving it."""
    created = await client.session.call_tool(tool, arguments, allow_claimed=True, **options)
    assert isinstance(created, CreatedTask), created
    return created
