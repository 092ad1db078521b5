"""MCP over plain HTTP with `requests`, no MCP library: self-contained 2026-07-28 tools/call POSTs (no
handshake, no teardown traffic), usable from plain threads, for load, fault and end-to-end tests and the
benchmarks."""

from __future__ import annotations

import time
from typing import Any

import requests

MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "kb-tests", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def modern_call(url: str, token: str | None, tool: str, arguments: dict[str, object], timeout: float = 60) -> dict[str, object]:
    """One self-contained 2026-07-28 tools/call POST (no handshake, no teardown traffic): the
    JSON-RPC reply. Usable from plain threads, for load and fault tests."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments, "_meta": MODERN_META}}
    headers = {
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool,
    }
    if token:
        headers["Authorization"] = f"Bearer {token}"
    response = requests.post(url + "/mcp", json=body, headers=headers, timeout=timeout)
    response.raise_for_status()
    return dict(response.json())


def error_code(reply: dict[str, Any]) -> str | None:
    """The stable error code of a tools/call reply, or None when the call succeeded."""
    result = reply.get("result") or {}
    return str(result["structuredContent"]["error"]["code"]) if result.get("isError") else None


def wait_for_job(url: str, token: str | None, job_id: int, timeout: float = 180) -> dict[str, object]:
    """Poll kb_jobs until the job is done (and fail if it failed); the job."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = modern_call(url, token, "kb_jobs", {"limit": 100})
        jobs = reply["result"]["structuredContent"]["jobs"]  # type: ignore[index]
        job = next((j for j in jobs if j["id"] == job_id), None)
        if job and job["status"] in ("done", "failed"):
            assert job["status"] == "done", job
            return dict(job)
        time.sleep(0.1)  # polling interval, bounded by the deadline
    raise TimeoutError(f"job {job_id} did not finish in {timeout}s")
