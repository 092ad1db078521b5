"""Uploads across real processes: 4 gunicorn workers, two bridges sharing a real Redis, workers
killed mid-upload, and a 50 MiB file that reaches the local engine byte for byte."""

from __future__ import annotations

import base64
import hashlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from kb_bridge.testing.processes import ENGINE_KEY
from kb_bridge.testing.mcp_client import connect
from kb_bridge.testing.mcp_http import wait_for_job
from kb_bridge.testing.processes import Service, start_bridge, tool_event_pids, wait_until, worker_pids
from kb_bridge.testing.files import minimal_pdf

pytestmark = pytest.mark.anyio

TOKEN = "agent-token-uploads-0123456789abcdef"
CHUNK = 2 * 1024 * 1024


def bridge_env(engine: Service, **extra: str) -> dict[str, str]:
    return {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_API_KEY": TOKEN, **extra}


async def tool(url: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One call on a fresh connection (so consecutive calls spread over workers)."""
    async with connect(url, TOKEN) as client:
        result = await client.call_tool(name, arguments)
    assert not result.is_error, f"{name}: {result.content[0].text}"
    return dict(result.structured_content)


def engine_document(engine: Service, document_id: int) -> dict[str, Any]:
    response = requests.get(f"{engine.url}/api/v1/documents/{document_id}", headers={"Authorization": f"Bearer {ENGINE_KEY}"}, timeout=30)
    response.raise_for_status()
    return dict(response.json())


def chunks_of(data: bytes, size: int = CHUNK) -> Iterator[tuple[int, str]]:
    for index, offset in enumerate(range(0, len(data), size)):
        yield index, base64.b64encode(data[offset : offset + size]).decode()


def big_pdf(size: int) -> bytes:
    """A valid PDF of about `size` bytes whose bulk is random bytes (quick for the engine to index)."""
    # Random bytes after %%EOF: PDF readers ignore trailing data, and every byte still counts.
    return minimal_pdf(["A large file used to test byte-exact uploads."]) + os.urandom(size)


async def test_31_four_workers_share_one_upload(engine: Service, tmp_path: Path) -> None:
    bridge = start_bridge(tmp_path, bridge_env(engine), workers=4)
    try:
        text = big_pdf(3 * 1024 * 1024)
        start = await tool(bridge.url, "kb_upload_start", {"filename": "four.pdf", "total_size": len(text), "sha256": hashlib.sha256(text).hexdigest()})
        pieces = list(chunks_of(text, 256 * 1024))
        for index, data in reversed(pieces):  # out of order, each on a fresh connection
            await tool(bridge.url, "kb_upload_chunk", {"upload_id": start["upload_id"], "chunk_index": index, "data": data})
        deadline = time.monotonic() + 60
        while len(tool_event_pids(bridge, "kb_upload_chunk")) < 3 and time.monotonic() < deadline:
            await tool(bridge.url, "kb_upload_chunk", {"upload_id": start["upload_id"], "chunk_index": 0, "data": pieces[0][1]})
        status = await tool(bridge.url, "kb_upload_status", {"upload_id": start["upload_id"]})
        finished = await tool(bridge.url, "kb_upload_finish", {"upload_id": start["upload_id"]})
        job = wait_for_job(bridge.url, TOKEN, finished["job_id"])
    finally:
        bridge.stop()
    assert len(tool_event_pids(bridge, "kb_upload_chunk")) >= 3
    assert status["missing"] == [] and status["received_bytes"] == len(text)
    stored = engine_document(engine, job["document_id"])
    assert stored["sha256"] == hashlib.sha256(text).hexdigest() and stored["size_bytes"] == len(text)


async def test_31_two_bridges_share_uploads_through_redis(engine: Service, redis_url: str, tmp_path: Path) -> None:
    env = bridge_env(engine, KB_UPLOAD_STORE=redis_url)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    first = start_bridge(tmp_path / "a", env, workers=1)
    second = start_bridge(tmp_path / "b", env, workers=1)
    try:
        pdf = big_pdf(5 * 1024 * 1024)
        start = await tool(first.url, "kb_upload_start", {"filename": "shared.pdf", "total_size": len(pdf)})
        for index, chunk in chunks_of(pdf, 1024 * 1024):
            target = first if index % 2 == 0 else second
            await tool(target.url, "kb_upload_chunk", {"upload_id": start["upload_id"], "chunk_index": index, "data": chunk})
        seen_by_first = await tool(first.url, "kb_upload_status", {"upload_id": start["upload_id"]})
        finished = await tool(second.url, "kb_upload_finish", {"upload_id": start["upload_id"]})
        again = await tool(first.url, "kb_upload_finish", {"upload_id": start["upload_id"]})
        job = wait_for_job(second.url, TOKEN, finished["job_id"])
    finally:
        first.stop()
        second.stop()
    assert seen_by_first["missing"] == [] and seen_by_first["received_bytes"] == len(pdf)
    assert again == {**finished, "status": again["status"]}  # idempotent across hosts: the same job, its status now
    stored = engine_document(engine, job["document_id"])
    assert stored["sha256"] == hashlib.sha256(pdf).hexdigest() and stored["size_bytes"] == len(pdf)


async def test_32_workers_killed_mid_upload_never_corrupt_it(engine: Service, tmp_path: Path) -> None:
    bridge = start_bridge(tmp_path, bridge_env(engine), workers=2)
    try:
        pdf = big_pdf(12 * 1024 * 1024)
        start = await tool(bridge.url, "kb_upload_start", {"filename": "killed.pdf", "total_size": len(pdf), "sha256": hashlib.sha256(pdf).hexdigest()})
        upload_id = start["upload_id"]
        pieces = list(chunks_of(pdf))
        for index, data in pieces[:3]:
            await tool(bridge.url, "kb_upload_chunk", {"upload_id": upload_id, "chunk_index": index, "data": data})
        # A chunk in flight when every worker is SIGKILLed: it lands whole or not at all.
        import threading

        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "kb_upload_chunk"}
        meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "kb_upload_chunk", "arguments": {"upload_id": upload_id, "chunk_index": 3, "data": pieces[3][1]}, "_meta": meta}}
        sender = threading.Thread(target=lambda: _swallow(lambda: requests.post(bridge.url + "/mcp", json=body, headers=headers, timeout=30)))
        sender.start()
        before = set(worker_pids(bridge))
        for pid in before:
            os.kill(pid, signal.SIGKILL)
        sender.join(30)
        # A half-written temporary file, as a writer killed at the worst moment leaves behind.
        upload_dir = next((tmp_path / "uploads").glob(f"*/{upload_id}"))
        (upload_dir / ".tmp-deadbeefdeadbeef").write_bytes(b"partial")
        wait_until(lambda: len(set(worker_pids(bridge)) - before) == 2, 60, what="gunicorn to replace the killed workers")
        status = await tool(bridge.url, "kb_upload_status", {"upload_id": upload_id})
        assert set(status["received_chunks"]) in ({0, 1, 2}, {0, 1, 2, 3})  # never a partial chunk
        for index, data in pieces:
            if index not in status["received_chunks"]:
                await tool(bridge.url, "kb_upload_chunk", {"upload_id": upload_id, "chunk_index": index, "data": data})
        finished = await tool(bridge.url, "kb_upload_finish", {"upload_id": upload_id})
        job = wait_for_job(bridge.url, TOKEN, finished["job_id"])
    finally:
        bridge.stop()
    assert finished["sha256"] == hashlib.sha256(pdf).hexdigest()
    assert engine_document(engine, job["document_id"])["sha256"] == finished["sha256"]


async def test_a_50_mib_file_reaches_the_engine_byte_exact(engine: Service, tmp_path: Path) -> None:
    bridge = start_bridge(tmp_path, bridge_env(engine), workers=2)
    try:
        pdf = big_pdf(50 * 1024 * 1024)
        digest = hashlib.sha256(pdf).hexdigest()
        start = await tool(bridge.url, "kb_upload_start", {"filename": "fifty.pdf", "total_size": len(pdf), "sha256": digest})
        assert start["max_chunk_bytes"] == CHUNK
        for index, data in chunks_of(pdf):
            await tool(bridge.url, "kb_upload_chunk", {"upload_id": start["upload_id"], "chunk_index": index, "data": data})
        finished = await tool(bridge.url, "kb_upload_finish", {"upload_id": start["upload_id"]})
        job = wait_for_job(bridge.url, TOKEN, finished["job_id"])
    finally:
        bridge.stop()
    stored = engine_document(engine, job["document_id"])
    assert finished["sha256"] == digest and finished["size_bytes"] == len(pdf)
    assert stored["sha256"] == digest and stored["size_bytes"] == len(pdf)
    assert stored["doc_type"] == "pdf" and "byte-exact" in stored["content"]


def _swallow(fn: Any) -> None:
    try:
        fn()
    except requests.RequestException:
        pass  # the worker died under this request: expected here
