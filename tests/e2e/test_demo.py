"""`kb-bridge demo`, the README's run command: one command, then an agent adds notes, uploads a
PDF and finds things by meaning; Ctrl-C stops both processes."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.mcp_client import connect
from kb_bridge.testing.processes import REPO, child_pids, clean_env, free_port, http_ok, wait_until
from kb_bridge.testing.files import minimal_pdf

pytestmark = pytest.mark.anyio


async def test_demo_runs_the_whole_system_and_stops_cleanly(tmp_path: Path) -> None:
    port, engine_port = free_port(), free_port()
    out = tmp_path / "demo.out"
    with open(out, "w") as sink:
        demo = subprocess.Popen(
            [sys.executable, "-m", "kb_bridge", "demo", "--data", str(tmp_path / "data"), "--port", str(port), "--engine-port", str(engine_port)],
            stdout=sink, stderr=subprocess.STDOUT, env=clean_env({}), cwd=REPO,
        )
    try:
        wait_until(lambda: "Press Ctrl-C" in out.read_text() or demo.poll() is not None, 300, interval=0.2, what="the demo")
        text = out.read_text()
        assert demo.poll() is None, text
        url = re.search(r"MCP URL:\s+(\S+)", text).group(1)  # type: ignore[union-attr]
        token = re.search(r"Token:\s+(\S+)", text).group(1)  # type: ignore[union-attr]
        assert f"claude mcp add --transport http kb {url}" in text and '"mcpServers"' in text
        base = url.removesuffix("/mcp")
        async with connect(base, token) as client:
            runbook = await client.call_tool("kb_search", {"query": "how do I undo a bad deployment", "collection": "documents", "top": 3})
            assert runbook.structured_content["results"][0]["title"] == "release-runbook.md"
            memory = await client.call_tool("kb_search", {"query": "what style of answers does the user like", "collection": "memory", "top": 1})
            assert "bullet points" in memory.structured_content["results"][0]["text"]
            note = await client.call_tool("kb_addnote", {"text": "The staging database is refreshed every Sunday night.",
                                                         "collection": "memory", "wait": True})
            assert note.structured_content["status"] == "done"
            pdf = minimal_pdf(["Parental leave", "Employees get sixteen weeks of paid parental leave."])
            started = await client.call_tool("kb_upload_start", {"filename": "leave.pdf", "total_size": len(pdf)})
            upload_id = started.structured_content["upload_id"]
            await client.call_tool("kb_upload_chunk", {"upload_id": upload_id, "chunk_index": 0, "data": base64.b64encode(pdf).decode()})
            finished = await client.call_tool("kb_upload_finish", {"upload_id": upload_id})
            job_id = finished.structured_content["job_id"]
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                jobs = (await client.call_tool("kb_jobs", {"limit": 50})).structured_content["jobs"]
                if next(j for j in jobs if j["id"] == job_id)["status"] == "done":
                    break
                time.sleep(0.2)
            found = await client.call_tool("kb_search", {"query": "how many weeks off do new parents get", "top": 1})
            assert found.structured_content["results"][0]["title"] == "leave.pdf"
        demo.send_signal(signal.SIGINT)
        assert demo.wait(60) == 0
        assert "stopped." in out.read_text()
        assert not http_ok(base + "/healthz") and not http_ok(f"http://127.0.0.1:{engine_port}/healthz")
    finally:
        if demo.poll() is None:
            # The engine and the bridge run in sessions of their own: stop them through the demo
            # (SIGINT), and only if that fails kill them directly.
            children = child_pids(demo.pid)
            demo.send_signal(signal.SIGINT)
            try:
                demo.wait(60)
            except subprocess.TimeoutExpired:
                for pid in children:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
                demo.kill()
                demo.wait(10)
