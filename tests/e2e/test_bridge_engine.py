"""End to end: the official MCP client → gunicorn (2 workers, auth on) → the real local engine.

Covers the acceptance scenarios against a real engine in both protocol eras, uploads whose chunks land on
different workers, a PDF found by meaning, the engine key, and an engine that comes up late.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from kb_bridge.testing.processes import ENGINE_KEY
from kb_bridge.testing.mcp_client import call, connect
from kb_bridge.testing.mcp_http import wait_for_job
from kb_bridge.testing.processes import Service, free_port, start_bridge, start_engine, tool_event_pids, wait_until
from kb_bridge.testing.files import minimal_pdf

pytestmark = pytest.mark.anyio

TOKEN = "agent-token-e2e-0123456789abcdef"


@pytest.fixture(scope="module")
def bridge(engine: Service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("bridge")
    env = {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_API_KEY": TOKEN}
    service = start_bridge(tmp, env, workers=2)
    yield service
    service.stop()


def engine_api(engine: Service, path: str) -> Any:
    response = requests.get(engine.url + "/api/v1" + path, headers={"Authorization": f"Bearer {ENGINE_KEY}"}, timeout=10)
    response.raise_for_status()
    return response.json()



@pytest.mark.parametrize("era", ["legacy", "auto"])
async def test_acceptance_scenarios_against_the_real_engine(bridge: Service, engine: Service, era: str) -> None:
    marker = f"marker{era}{os.getpid()}"
    async with connect(bridge.url, TOKEN, era) as client:
        # Add a note to a collection; it is ingested with exactly one collection tag.
        added = await call(client, "kb_addnote", {
            "text": f"The user prefers concise responses with bullet points. {marker}",
            "collection": "memory", "tags": ["feedback"], "source_path": f"memory/{marker}.md",
        })
        assert added["collection"] == "memory" and added["tags"] == ["feedback"]
        job = wait_for_job(bridge.url, TOKEN, added["job_id"])
        document_id = job["document_id"]
        stored = engine_api(engine, f"/documents/{document_id}")
        assert [t for t in stored["tags"] if t.startswith("collection:")] == ["collection:memory"]

        # Search scoped to the collection finds it, with the collection as a field.
        found = await call(client, "kb_search", {"query": marker, "collection": "memory", "tags": ["feedback"]})
        hit = next(h for h in found["results"] if h["document_id"] == document_id)
        assert hit["collection"] == "memory" and hit["tags"] == ["feedback"]
        elsewhere = await call(client, "kb_search", {"query": marker, "collection": "documents"})
        assert all(h["document_id"] != document_id for h in elsewhere["results"])
        fts = await call(client, "kb_search", {"query": marker, "fts_only": True})
        assert fts["mode"] == "fts" and any(h["document_id"] == document_id for h in fts["results"])

        # Get by id and by source path; collection tags stripped.
        by_id = (await call(client, "kb_get", {"document_id": document_id}))["documents"][0]
        assert marker in by_id["content"] and by_id["chunks"] and by_id["collection"] == "memory"
        by_path = (await call(client, "kb_get", {"source_path": f"memory/{marker}.md"}))["documents"]
        assert [d["id"] for d in by_path] == [document_id]

        # Update in place: same id, created_at kept, version bumped, new text searchable.
        updated = await call(client, "kb_update_note", {"document_id": document_id, "text": f"Bullet points, always. {marker}x"})
        assert updated["id"] == document_id and updated["version"] > by_id["version"]
        assert updated["created_at"] == by_id["created_at"]
        assert (await call(client, "kb_search", {"query": f"{marker}x", "fts_only": True}))["results"]

        # Move collections: exactly one collection tag afterwards.
        moved = await call(client, "kb_update_note", {"document_id": document_id, "collection": "documents"})
        assert moved["collection"] == "documents"
        tags = engine_api(engine, f"/documents/{document_id}")["tags"]
        assert [t for t in tags if t.startswith("collection:")] == ["collection:documents"]

        # Status and jobs.
        status = await call(client, "kb_status", {})
        assert status["engine"]["version"].startswith("3.") and status["engine"]["documents"]["total"] >= 1
        done = await call(client, "kb_jobs", {"status": "done"})
        assert done["jobs"] and all(j["status"] == "done" for j in done["jobs"])

        # Missing documents and non-notes.
        missing = await client.call_tool("kb_update_note", {"document_id": 10**9, "text": "x"})
        assert missing.is_error and missing.structured_content["error"]["code"] == "NOT_FOUND"


async def upload_in_chunks(
    bridge: Service, data: bytes, filename: str, chunk_size: int, spread: bool = False, **start: Any
) -> dict[str, Any]:
    """Every step on a fresh connection, so the steps spread over the workers. With `spread`,
    chunk 0 is resent (identical bytes are harmless) until both workers have stored a chunk."""
    async with connect(bridge.url, TOKEN) as client:
        began = await call(client, "kb_upload_start", {"filename": filename, "total_size": len(data),
                                                        "sha256": hashlib.sha256(data).hexdigest(), **start})

    async def send(index: int) -> None:
        piece = data[index * chunk_size : (index + 1) * chunk_size]
        async with connect(bridge.url, TOKEN) as client:
            await call(client, "kb_upload_chunk", {"upload_id": began["upload_id"], "chunk_index": index,
                                                   "data": base64.b64encode(piece).decode()})

    for index in range((len(data) + chunk_size - 1) // chunk_size):
        await send(index)
    deadline = time.monotonic() + 60
    while spread and len(tool_event_pids(bridge, "kb_upload_chunk")) < 2 and time.monotonic() < deadline:
        await send(0)
    async with connect(bridge.url, TOKEN) as client:
        return await call(client, "kb_upload_finish", {"upload_id": began["upload_id"]})


async def test_upload_with_chunks_on_different_workers(bridge: Service, engine: Service) -> None:
    lines = [f"Line {i}: the quick brown fox audits ledger {i * 7919}." for i in range(4000)]
    data = "\n".join(lines).encode()
    finished = await upload_in_chunks(bridge, data, "ledger.txt", 16 * 1024, spread=True, collection="documents")
    assert finished["size_bytes"] == len(data) and finished["sha256"] == hashlib.sha256(data).hexdigest()
    assert len(tool_event_pids(bridge, "kb_upload_chunk")) == 2, "chunks should have been served by both workers"
    async with connect(bridge.url, TOKEN) as client:
        job = wait_for_job(bridge.url, TOKEN, finished["job_id"])
        document = (await call(client, "kb_get", {"document_id": job["document_id"]}))["documents"][0]
    assert document["content"].strip() == data.decode().strip()
    assert document["doc_type"] == "txt" and document["source_path"] == "uploads/ledger.txt"


async def test_pdf_upload_is_found_by_meaning(bridge: Service) -> None:
    pdf = minimal_pdf([
        "Photosynthesis in plant leaves",
        "Chlorophyll absorbs sunlight and turns carbon dioxide and water into glucose and oxygen.",
    ])
    finished = await upload_in_chunks(bridge, pdf, "biology.pdf", 256, tags=["science"])
    async with connect(bridge.url, TOKEN) as client:
        job = wait_for_job(bridge.url, TOKEN, finished["job_id"])
        found = await call(client, "kb_search", {"query": "how do green plants make food from light", "mode": "vector", "top": 3})
        mode = found["mode"]
        assert mode == "vector", "the engine should run with the embedding model in these tests"
        assert found["results"][0]["document_id"] == job["document_id"]
        assert found["results"][0]["doc_type"] == "pdf" and found["results"][0]["tags"] == ["science"]
        not_a_note = await client.call_tool("kb_update_note", {"document_id": job["document_id"], "text": "x"})
    assert not_a_note.is_error and not_a_note.structured_content["error"]["code"] == "NOT_A_NOTE"


async def test_a_wrong_engine_key_is_reported_as_misconfiguration(engine: Service, tmp_path: Path) -> None:
    env = {"KB_ENGINE_URL": engine.url, "KB_API_KEY": "not-the-engine-key-000", "KB_MCP_API_KEY": TOKEN}
    service = start_bridge(tmp_path, env, workers=1)
    try:
        async with connect(service.url, TOKEN) as client:
            result = await client.call_tool("kb_status", {})
    finally:
        service.stop()
    assert result.is_error and result.structured_content["error"]["code"] == "ENGINE_AUTH_ERROR"
    assert "not-the-engine-key" not in result.content[0].text


async def test_37_engine_down_at_start_then_up_without_restarting_the_bridge(tmp_path: Path) -> None:
    engine_port = free_port()
    env = {"KB_ENGINE_URL": f"http://127.0.0.1:{engine_port}", "KB_MCP_API_KEY": TOKEN, "KB_ENGINE_RETRIES": "1"}
    bridge = start_bridge(tmp_path, env, workers=1)
    try:
        async with connect(bridge.url, TOKEN) as client:
            down = await client.call_tool("kb_status", {})
        assert down.is_error and down.structured_content["error"]["code"] == "ENGINE_UNAVAILABLE"
        engine = start_engine(tmp_path, tmp_path / "data", port=engine_port)
        try:
            wait_until(lambda: requests.get(bridge.url + "/readyz", timeout=5).status_code == 200, 30, what="readyz")
            async with connect(bridge.url, TOKEN) as client:
                up = await client.call_tool("kb_status", {})
            assert not up.is_error and up.structured_content["engine"]["version"].startswith("3.")
        finally:
            engine.stop()
    finally:
        bridge.stop()
