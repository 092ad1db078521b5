"""Issue 38 item 3: a waiting call reports the job's stages as progress notifications (queued → running →
chunks embedded of all → done), only ever increasing, in both eras; without a progress token, none."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import responses
from mcp import Client

from kb_bridge.tools.waiting import JobProgress, stage
from kb_bridge.testing.fake_engine import API
from kb_bridge.testing.fake_engine import job

pytestmark = pytest.mark.anyio

Seen = list[tuple[float, float | None, str]]


def recorder(seen: Seen) -> Any:
    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, total, message or ""))

    return on_progress


def running(id: int, done: int, total: int) -> dict[str, Any]:
    return job(id, status="running", progress={"chunks_done": done, "chunks_total": total})


async def test_addnote_wait_reports_each_stage_once(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(8))
    for answer in (job(8), running(8, 0, 4), running(8, 0, 4), running(8, 2, 4), job(8, status="running"),
                   running(8, 4, 4), job(8, status="done", document_id=55)):
        engine.get(f"{API}/jobs/8", json=answer)
    seen: Seen = []
    result = await client.call_tool("kb_addnote", {"text": "x", "wait": True}, progress_callback=recorder(seen))
    assert result.structured_content["document_id"] == 55
    assert [message for _, _, message in seen] == [
        "job 8 is queued",
        "job 8 is running: 0 of 4 chunks embedded",
        "job 8 is running: 2 of 4 chunks embedded",  # the bare "running" after it is no further: not sent
        "job 8 is running: 4 of 4 chunks embedded",
        "job 8 is done",
    ]
    values = [value for value, _, _ in seen]
    assert values == sorted(set(values)) and values[-1] == 100 and {total for _, total, _ in seen} == {100}


async def test_no_token_no_notifications(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(8))
    engine.get(f"{API}/jobs/8", json=job(8, status="done", document_id=5))
    result = await client.call_tool("kb_addnote", {"text": "x", "wait": True})
    assert result.structured_content["status"] == "done"


async def test_upload_finish_wait_sends_bytes_then_the_job(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(9, type="file"))
    engine.get(f"{API}/jobs/9", json=running(9, 1, 2))
    engine.get(f"{API}/jobs/9", json=job(9, type="file", status="done", document_id=3))
    started = await client.call_tool("kb_upload_start", {"filename": "a.txt", "total_size": 5})
    upload_id = started.structured_content["upload_id"]
    await client.call_tool("kb_upload_chunk", {"upload_id": upload_id, "chunk_index": 0,
                                               "data": base64.b64encode(b"hello").decode()})
    seen: Seen = []
    result = await client.call_tool("kb_upload_finish", {"upload_id": upload_id, "wait": True},
                                    progress_callback=recorder(seen))
    assert result.structured_content["status"] == "done" and "is indexed" in result.content[0].text
    assert seen[0] == (50.0, 100.0, "sending the file to the engine: 5 of 5 bytes")
    assert [message for _, _, message in seen[1:]] == [
        "job 9 is queued", "job 9 is running: 1 of 2 chunks embedded", "job 9 is done"]
    assert [value for value, _, _ in seen] == sorted({value for value, _, _ in seen})


async def test_a_failed_or_cancelled_job_ends_the_wait_with_an_error(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(8))
    engine.get(f"{API}/jobs/8", json=job(8, status="cancelled"))
    result = await client.call_tool("kb_addnote", {"text": "x", "wait": True})
    assert result.is_error and "cancelled before it ran" in result.content[0].text


def test_stages_without_engine_progress() -> None:
    assert stage({"id": 1, "status": "queued"}) == (0.05, "job 1 is queued")
    assert stage({"id": 1, "status": "running", "progress": {"chunks_done": 3, "chunks_total": 2}})[1] == "job 1 is running"
    sent: list[float] = []
    tracker = JobProgress(lambda value, total, message: sent.append(value), low=50.0)
    for status in ("queued", "queued", "running", "done", "done"):
        tracker.observe({"id": 1, "status": status})
    assert sent == [52.5, 55.0, 100.0]
