"""The official MCP Python client over Streamable HTTP, with a bearer token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


@asynccontextmanager
async def connect(url: str, token: str | None, era: str = "auto", timeout: float = 60.0) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        async with Client(streamable_http_client(url + "/mcp", http_client=http), mode=era) as client:
            yield client


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool call that must succeed: its structured result."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}: {result.content[0]}"
    return dict(result.structured_content or {})


async def error_of(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    """A tool call that must fail: its error code."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} should have failed: {result.structured_content}"
    return str((result.structured_content or {})["error"]["code"])
