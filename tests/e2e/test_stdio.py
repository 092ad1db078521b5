"""`kb-bridge stdio` with the official client, and stdout carrying nothing but JSON-RPC (checklist 42)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from kb_bridge.testing.processes import REPO, clean_env, free_port

pytestmark = pytest.mark.anyio


def stdio_env(**extra: str) -> dict[str, str]:
    return clean_env({"KB_ENGINE_URL": f"http://127.0.0.1:{free_port()}", "KB_ENGINE_RETRIES": "1", **extra})


@pytest.mark.parametrize("era", ["legacy", "auto"])
async def test_official_client_over_stdio(era: str) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "kb_bridge", "stdio"], env=stdio_env(), cwd=str(REPO))
    async with Client(params, mode=era) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        result = await client.call_tool("kb_status", {})
    assert {"kb_search", "kb_addnote", "kb_upload_start", "kb_get", "kb_status", "kb_jobs", "kb_update_note"} <= names
    assert result.is_error and result.structured_content["error"]["code"] == "ENGINE_UNAVAILABLE"


def test_42_stdout_carries_only_json_rpc_even_at_debug_level() -> None:
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "kb_search", "arguments": {"query": "x"}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "kb_search", "arguments": {"top": "bad"}}},
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "kb_bridge", "stdio"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=stdio_env(KB_LOG_LEVEL="DEBUG"), cwd=REPO,
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
    process.stdin.flush()
    replies = []
    try:
        while len([r for r in replies if "id" in r]) < 4:
            line = process.stdout.readline()  # bounded by the communicate timeout below
            assert line, "stdout closed early"
            replies.append(json.loads(line))  # every stdout line parses as JSON
    finally:
        _, stderr = process.communicate(timeout=60)
    assert all(reply.get("jsonrpc") == "2.0" for reply in replies)
    assert sorted(r["id"] for r in replies if "id" in r) == [1, 2, 3, 4]
    assert "mcp_tool" in stderr  # the logs went to stderr instead
