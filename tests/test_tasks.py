"""Issue 38 item 2: kb_addnote, kb_upload_finish and kb_update_note run as MCP tasks when the client asks,
in both eras; the task follows the engine job, so its id is all any worker needs (tools/task_ids.py)."""

from __future__ import annotations

import base64
import json
import os
import random
import string
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import responses
from mcp import Client
from mcp.shared.exceptions import MCPError

from kb_bridge.auth.principal import LOCAL
from kb_bridge.protocol.server import build_server
from kb_bridge.runtime import Bridge

from kb_bridge.tools.task_ids import MAX_ID_CHARS, TaskRef, decode, encode, task_key
from kb_bridge.testing.fake_engine import API, make_settings
from kb_bridge.testing.fake_engine import calls_to, chunk, document, job, search_response
from kb_bridge.testing.tasks_client import TasksExtension, create_task, task_request

pytestmark = pytest.mark.anyio

TAGS = ["collection:memory", "prefs"]


def note_job(status: str = "queued", **fields: Any) -> dict[str, Any]:
    return job(8, status=status, tags=TAGS, **fields)


@pytest.fixture
async def modern(bridge: Bridge) -> Any:
    async with Client(build_server(bridge), extensions=[TasksExtension()]) as client:
        yield client


@pytest.fixture
async def legacy(bridge: Bridge) -> Any:
    async with Client(build_server(bridge), mode="legacy") as client:
        yield client


async def raw(client: Client, method: str, **params: Any) -> dict[str, Any]:
    from kb_bridge.testing.tasks_client import _ANY, _TaskRequest

    return dict(await client.session.send_request(_TaskRequest(method=method, params=params), _ANY))


# --- 2026-07-28: the io.modelcontextprotocol/tasks extension -----------------------------------------------


async def test_a_note_task_follows_its_job_to_an_inline_result(modern: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=note_job())
    engine.get(f"{API}/jobs/8", json=note_job("running", progress={"chunks_done": 1, "chunks_total": 3}))
    engine.get(f"{API}/jobs/8", json=note_job("done", document_id=55))
    created = await create_task(modern, "kb_addnote", {"text": "x", "collection": "memory", "tags": ["prefs"], "wait": True})
    assert created.status == "working" and created.ttl_ms is None and created.poll_interval_ms == 500
    assert "result" not in (created.model_extra or {})
    working = await task_request(modern.session, "tasks/get", created.task_id)
    assert working["status"] == "working" and working["statusMessage"] == "job 8 is running: 1 of 3 chunks embedded"
    assert working["createdAt"] == created.created_at and "result" not in working
    done = await task_request(modern.session, "tasks/get", created.task_id)
    assert done["status"] == "completed" and done["resultType"] == "complete"
    assert done["result"]["structuredContent"] == {"job_id": 8, "status": "done", "document_id": 55,
                                                   "collection": "memory", "tags": ["prefs"],
                                                   "duplicate_of": None, "similar": []}
    assert "indexed as document #55" in done["result"]["content"][0]["text"]
    assert len(calls_to(engine, "POST", "/jobs")) == 1  # `wait` was dropped: the task is the wait


async def test_the_extension_resolves_a_task_for_the_caller(modern: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=note_job())
    engine.get(f"{API}/jobs/8", json=note_job("done", document_id=5))
    result = await modern.call_tool("kb_addnote", {"text": "x", "collection": "memory", "tags": ["prefs"]})
    assert result.structured_content["status"] == "done" and result.structured_content["document_id"] == 5


async def test_cancel_takes_back_a_queued_job_and_acknowledges_empty(modern: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=note_job())
    engine.get(f"{API}/jobs/8", json=note_job())
    engine.delete(f"{API}/jobs/8", json=note_job("cancelled", finished_at="2026-04-04T21:50:20Z"))
    created = await create_task(modern, "kb_addnote", {"text": "x", "collection": "memory", "tags": ["prefs"]})
    ack = await task_request(modern.session, "tasks/cancel", created.task_id)
    assert ack == {"resultType": "complete", "_meta": ack["_meta"]}
    engine.replace(responses.GET, f"{API}/jobs/8", json=note_job("cancelled"))
    assert (await task_request(modern.session, "tasks/get", created.task_id))["status"] == "cancelled"


async def test_cancel_of_a_running_job_leaves_it_working(modern: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=note_job())
    engine.get(f"{API}/jobs/8", json=note_job("running"))
    engine.delete(f"{API}/jobs/8", status=409, json={"error": {"code": "conflict", "message": "job 8 is running"}})
    created = await create_task(modern, "kb_addnote", {"text": "x", "collection": "memory", "tags": ["prefs"]})
    await task_request(modern.session, "tasks/cancel", created.task_id)
    assert (await task_request(modern.session, "tasks/get", created.task_id))["status"] == "working"


async def test_a_failed_job_is_a_completed_task_with_an_error_result(modern: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=note_job())
    engine.get(f"{API}/jobs/8", json=note_job("failed", error="parser exploded"))
    created = await create_task(modern, "kb_addnote", {"text": "x", "collection": "memory", "tags": ["prefs"]})
    task = await task_request(modern.session, "tasks/get", created.task_id)
    assert task["status"] == "completed" and task["result"]["isError"]
    assert task["result"]["structuredContent"]["error"]["code"] == "INGESTION_FAILED"


async def test_a_tool_error_before_any_job_is_a_plain_result(modern: Client, engine: responses.RequestsMock) -> None:
    result = await modern.session.call_tool("kb_addnote", {"text": ""}, allow_claimed=True)
    assert isinstance(result, types.CallToolResult) and result.is_error
    assert not engine.calls


async def test_an_update_task_is_complete_when_made(modern: Client, engine: responses.RequestsMock) -> None:
    engine.patch(f"{API}/notes/42", json=document(42, version=2))
    created = await create_task(modern, "kb_update_note", {"document_id": 42, "text": "new"})
    assert created.status == "completed"
    task = await task_request(modern.session, "tasks/get", created.task_id)
    assert task["status"] == "completed" and task["result"]["structuredContent"]["version"] == 2


async def test_an_upload_finish_task(modern: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(9, type="file", tags=["collection:documents"]))
    engine.get(f"{API}/jobs/9", json=job(9, type="file", status="done", document_id=3, tags=["collection:documents"]))
    upload_id = (await modern.call_tool("kb_upload_start", {"filename": "a.txt", "total_size": 5})).structured_content["upload_id"]
    await modern.call_tool("kb_upload_chunk", {"upload_id": upload_id, "chunk_index": 0, "data": base64.b64encode(b"hello").decode()})
    created = await create_task(modern, "kb_upload_finish", {"upload_id": upload_id})
    task = await task_request(modern.session, "tasks/get", created.task_id)
    assert task["result"]["structuredContent"] == {"job_id": 9, "status": "done", "filename": "a.txt", "size_bytes": 5,
                                                   "sha256": task["result"]["structuredContent"]["sha256"]}


# --- task ids stay short and reveal nothing (tools/task_ids.py, tools/task_results.py) -----------------------

# The review's case (compresses to little: its result stays whole in the id), and values of the same sizes that
# do not compress (their result is held as a reference, tools/task_results.py).
LONG_TITLE = "é" * 500
LONG_TAGS = [("é" * 190) + f"{i:03d}" for i in range(20)]


def noise(length: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_letters + string.digits + "éüßø") for _ in range(length))


NOISY_TITLE = noise(500, 99)
NOISY_TAGS = [noise(200, i) for i in range(20)]


def id_bytes(task_id: str) -> bytes:
    return base64.urlsafe_b64decode(task_id + "=" * (-len(task_id) % 4))


def reveals(task_id: str, *texts: str) -> list[str]:
    """Which of `texts` an id's bytes hold (their first 20 characters, as UTF-8 or as JSON escapes them)."""
    raw = id_bytes(task_id)
    return [text for text in texts if text[:20].encode() in raw or json.dumps(text[:20])[1:-1].encode() in raw]


@pytest.mark.parametrize("title, tags", [(LONG_TITLE, LONG_TAGS), (NOISY_TITLE, NOISY_TAGS)], ids=["review", "noise"])
async def test_a_large_update_task_has_a_short_opaque_id_and_the_same_result(
    modern: Client, engine: responses.RequestsMock, title: str, tags: list[str],
) -> None:
    """The review's case: a 500-character title and 20 tags of 200 once made a 35 KB id whose base64 held them."""
    from kb_bridge import shapes
    from kb_bridge.tools.notes import render_document

    updated = document(42, title=title, tags=["collection:memory", *tags], version=3)
    engine.patch(f"{API}/notes/42", json=document(42, title=title, tags=["collection:memory"], version=2))
    engine.get(f"{API}/documents/42", json=document(42, title=title, tags=["collection:memory"], version=2))
    engine.patch(f"{API}/documents/42/tags", json={"id": 42, "tags": updated["tags"], "version": 3})
    engine.get(f"{API}/documents/42", json=updated)
    created = await create_task(modern, "kb_update_note", {"document_id": 42, "title": title, "tags": tags})
    assert created.status == "completed" and len(created.task_id) <= MAX_ID_CHARS
    assert reveals(created.task_id, title, *tags, "memory", "kb_update_note") == []
    reads = len(calls_to(engine, "GET", "/documents/42"))
    task = await task_request(modern.session, "tasks/get", created.task_id)
    assert task["status"] == "completed"
    assert task["result"]["structuredContent"] == shapes.document(updated)
    assert task["result"]["content"][0]["text"] == render_document(shapes.document(updated))
    again = calls_to(engine, "GET", "/documents/42")[reads:]
    if title == NOISY_TITLE:  # a reference: the note at the call's version
        assert [call.request.url.endswith("?version=3") for call in again] == [True]
    else:  # the whole result, in the id
        assert again == []


async def test_a_large_note_task_reads_its_tags_and_hints_again_once_done(modern: Client, engine: responses.RequestsMock) -> None:
    hint = chunk(77, 31, text=noise(400, 7), score=0.9, title=noise(300, 8))
    engine.post(f"{API}/jobs", status=202, json=job(8, tags=["collection:memory", *NOISY_TAGS]))
    engine.post(f"{API}/search", json=search_response(hint, mode="vector"))
    engine.get(f"{API}/jobs/8", json=job(8, status="done", document_id=55, tags=["collection:memory", *NOISY_TAGS]))
    engine.get(f"{API}/documents/55", json=document(55, content="the note's text", tags=["collection:memory"]))
    created = await create_task(modern, "kb_addnote", {"text": "the note's text", "collection": "memory", "tags": NOISY_TAGS})
    assert len(created.task_id) <= MAX_ID_CHARS
    assert reveals(created.task_id, *NOISY_TAGS, hint["title"], hint["text"], "memory") == []
    done = await task_request(modern.session, "tasks/get", created.task_id)
    similar = [{"document_id": 31, "title": hint["title"], "score": 0.9, "snippet": hint["text"][:159] + "…"}]
    assert done["result"]["structuredContent"] == {"job_id": 8, "status": "done", "document_id": 55, "collection": "memory",
                                                   "tags": NOISY_TAGS, "duplicate_of": None, "similar": similar}
    assert len(calls_to(engine, "POST", "/search")) == 2  # the hints were searched again, from the note's text


async def test_a_large_upload_task_takes_its_file_name_from_the_job(modern: Client, engine: responses.RequestsMock) -> None:
    name = noise(120, 5).replace("é", "e").replace("ü", "u").replace("ß", "s").replace("ø", "o") + noise(60, 6) + ".txt"
    engine.post(f"{API}/jobs", status=202, json=job(9, type="file", filename=name, tags=["collection:documents"]))
    engine.get(f"{API}/jobs/9", json=job(9, type="file", status="done", document_id=3, filename=name, tags=["collection:documents"]))
    upload_id = (await modern.call_tool("kb_upload_start", {"filename": name, "total_size": 5})).structured_content["upload_id"]
    await modern.call_tool("kb_upload_chunk", {"upload_id": upload_id, "chunk_index": 0, "data": base64.b64encode(b"hello").decode()})
    created = await create_task(modern, "kb_upload_finish", {"upload_id": upload_id})
    assert len(created.task_id) <= MAX_ID_CHARS and reveals(created.task_id, name) == []
    task = await task_request(modern.session, "tasks/get", created.task_id)
    sha = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"  # sha256("hello")
    assert task["result"]["structuredContent"] == {"job_id": 9, "status": "done", "filename": name, "size_bytes": 5, "sha256": sha}


def test_every_tools_largest_result_seals_within_the_bound() -> None:
    """References hold only bounded values: the longest owner, ids, collection and digest still fit."""
    big, owner = 2**63 - 1, "".join(c for c in noise(200, 1) if c.isascii())[:64]  # a tokens-file name
    hints = [{"document_id": big, "title": noise(500, i), "score": 1.0, "snippet": noise(160, i + 3)} for i in range(3)]
    results = {
        "kb_update_note": {"id": big, "title": NOISY_TITLE, "doc_type": noise(20, 2), "source_path": noise(1024, 3),
                           "collection": noise(64, 4), "tags": NOISY_TAGS, "chunk_count": big, "version": big,
                           "created_at": noise(40, 5), "updated_at": noise(40, 6)},
        "kb_addnote": {"job_id": big, "status": noise(300, 7), "document_id": big, "collection": noise(64, 4).encode().hex()[:64],
                       "tags": NOISY_TAGS, "duplicate_of": big, "similar": hints},
        "kb_upload_finish": {"job_id": big, "status": noise(300, 7), "filename": noise(127, 8), "size_bytes": big,
                             "sha256": noise(32, 9).encode().hex()[:64]},
    }
    for tool, result in results.items():
        task_id = encode(TaskRef(owner, tool, None if tool == "kb_update_note" else big, result, "2026-01-01T00:00:00Z"), b"k" * 32)
        assert len(task_id) <= MAX_ID_CHARS, tool
        ref = decode(task_id, b"k" * 32)
        assert ref is not None and not ref.whole and ref.owner == owner


def test_a_referenced_update_answers_a_write_only_token_what_it_set_and_not_found_once_the_version_is_gone(
    bridge: Bridge, engine: responses.RequestsMock,
) -> None:
    from kb_bridge.auth.principal import Principal
    from kb_bridge.tools import tasks
    from kb_bridge.tools.spec import ToolContext

    writer = Principal("w", scopes=frozenset({"kb:write"}))
    answered = {"id": 42, "version": 3, "updated_at": "2026-04-05T08:00:00Z", "title": NOISY_TITLE, "tags": NOISY_TAGS}
    key = task_key(bridge.settings)
    ref = decode(encode(TaskRef(writer.owner, "kb_update_note", None, answered, "2026-01-01T00:00:00Z"), key), key)
    assert ref is not None and not ref.whole
    context = ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=writer)
    engine.get(f"{API}/documents/42", json=document(42, title=NOISY_TITLE, tags=["collection:memory", *NOISY_TAGS], version=3))
    assert tasks.read(context, ref).result == answered  # not the collection, doc_type, ... it did not set
    engine.replace(responses.GET, f"{API}/documents/42", status=404, json={"error": {"code": "not_found", "message": "gone"}})
    gone = tasks.read(context, ref)
    assert gone.status == tasks.COMPLETED and gone.error is not None and gone.error.code == "NOT_FOUND"


async def test_an_id_longer_than_the_bound_is_refused_before_it_is_opened(
    modern: Client, engine: responses.RequestsMock, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kb_bridge.protocol import tasks as protocol_tasks

    opened: list[str] = []
    monkeypatch.setattr(protocol_tasks, "decode", lambda task_id, key: opened.append(task_id))
    for method in ("tasks/get", "tasks/cancel"):
        with pytest.raises(MCPError) as refused:
            await task_request(modern.session, method, "A" * (MAX_ID_CHARS + 1))
        assert refused.value.error.code == types.INVALID_PARAMS and f"at most {MAX_ID_CHARS}" in refused.value.error.message
    assert opened == [] and not engine.calls


async def test_without_the_extension_a_call_runs_as_before(client: Client, engine: responses.RequestsMock, era: str) -> None:
    engine.post(f"{API}/jobs", status=202, json=note_job())
    result = await client.call_tool("kb_addnote", {"text": "x", "collection": "memory", "tags": ["prefs"]})
    assert result.structured_content["status"] == "queued"


async def test_tasks_methods_need_the_extension_declared(bridge: Bridge) -> None:
    async with Client(build_server(bridge)) as plain:
        with pytest.raises(MCPError) as refused:
            await task_request(plain.session, "tasks/get", "anything")
    assert refused.value.error.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY


async def test_unknown_forged_and_other_principals_ids_are_unknown(modern: Client, bridge: Bridge, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/jobs/8", json=note_job())
    key = task_key(bridge.settings)
    theirs = encode(TaskRef("someone-else", "kb_addnote", 8, {"job_id": 8}, "2026-01-01T00:00:00Z"), key)
    ours = encode(TaskRef(LOCAL.owner, "kb_addnote", 8, {"job_id": 8}, "2026-01-01T00:00:00Z"), key)
    forged = encode(TaskRef(LOCAL.owner, "kb_addnote", 9, {"job_id": 9}, "2026-01-01T00:00:00Z"), b"x" * 32)
    edited = ours[:20] + ("A" if ours[20] != "A" else "B") + ours[21:]
    for task_id in ("tasks-conformance-nonexistent-12345", theirs, forged, edited):
        with pytest.raises(MCPError) as unknown:
            await task_request(modern.session, "tasks/get", task_id)
        assert unknown.value.error.code == types.INVALID_PARAMS
    assert decode(ours, key) is not None and decode(ours, b"y" * 32) is None


async def test_removed_methods_are_not_found(modern: Client) -> None:
    for method in ("tasks/result", "tasks/list"):
        with pytest.raises(MCPError) as missing:
            await task_request(modern.session, method, "x")
        assert missing.value.error.code == types.METHOD_NOT_FOUND


# --- 2025-11-25: experimental tasks ---------------------------------------------------------------------------


async def test_legacy_capability_and_tool_execution(legacy: Client, modern: Client) -> None:
    assert legacy.session.initialize_result is not None
    assert legacy.session.initialize_result.protocol_version == "2025-11-25"
    tasks = legacy.server_capabilities.tasks
    assert tasks is not None and tasks.requests is not None and tasks.cancel is not None and tasks.list is None
    tools = {tool.name: tool for tool in (await legacy.list_tools()).tools}
    assert {name for name, tool in tools.items() if tool.execution} == {"kb_addnote", "kb_upload_finish", "kb_update_note"}
    assert tools["kb_addnote"].execution.task_support == "optional"
    assert "io.modelcontextprotocol/tasks" in (modern.server_capabilities.extensions or {})
    assert modern.server_capabilities.tasks is None


async def test_legacy_result_waits_and_reports_progress(legacy: Client, modern: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=note_job())
    engine.get(f"{API}/jobs/8", json=note_job())
    task = await legacy_task(modern)
    engine.replace(responses.GET, f"{API}/jobs/8", json=note_job("running", progress={"chunks_done": 2, "chunks_total": 4}))
    engine.add(responses.GET, f"{API}/jobs/8", json=note_job("done", document_id=9))
    from kb_bridge.testing.tasks_client import _ANY, _TaskRequest

    seen: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        seen.append(message or "")

    result = await legacy.session.send_request(_TaskRequest(method="tasks/result", params={"taskId": task["taskId"]}), _ANY,
                                               progress_callback=on_progress)
    assert result["structuredContent"]["document_id"] == 9
    assert seen == ["job 8 is running: 2 of 4 chunks embedded", "job 8 is done"]


# The official Python client checks a 2025-era tools/call answer against CallToolResult, so it cannot receive
# the CreateTaskResult ({task}); these tests make the task over 2026-07-28 (an id serves both eras) and the
# TypeScript SDK client makes legacy tasks itself (tests/e2e/test_ts_client.py).


async def legacy_task(modern: Client) -> dict[str, Any]:
    created = await create_task(modern, "kb_addnote", {"text": "x", "collection": "memory", "tags": ["prefs"]})
    return {"taskId": created.task_id}


async def test_legacy_task_get_result_and_cancel(legacy: Client, modern: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=note_job())
    engine.get(f"{API}/jobs/8", json=note_job())
    task = await legacy_task(modern)
    got = await raw(legacy, "tasks/get", taskId=task["taskId"])
    assert got["status"] == "working" and got["ttl"] is None and got["pollInterval"] == 500 and "ttlMs" not in got
    engine.replace(responses.GET, f"{API}/jobs/8", json=note_job("done", document_id=7))
    result = await raw(legacy, "tasks/result", taskId=task["taskId"])
    assert result["structuredContent"]["document_id"] == 7
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task["taskId"]}
    with pytest.raises(MCPError) as ended:
        await raw(legacy, "tasks/cancel", taskId=task["taskId"])
    assert ended.value.error.code == types.INVALID_PARAMS and "ended" in ended.value.error.message


async def test_legacy_cancel_answers_the_cancelled_task(legacy: Client, modern: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=note_job())
    engine.get(f"{API}/jobs/8", json=note_job())
    engine.delete(f"{API}/jobs/8", json=note_job("cancelled"))
    task = await legacy_task(modern)
    cancelled = await raw(legacy, "tasks/cancel", taskId=task["taskId"])
    assert cancelled["status"] == "cancelled" and cancelled["taskId"] == task["taskId"]


async def test_legacy_failed_job_is_a_failed_task_whose_result_is_the_error(legacy: Client, modern: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=note_job())
    engine.get(f"{API}/jobs/8", json=note_job("failed", error="bad"))
    task = await legacy_task(modern)
    assert (await raw(legacy, "tasks/get", taskId=task["taskId"]))["status"] == "failed"
    assert (await raw(legacy, "tasks/result", taskId=task["taskId"]))["isError"] is True


async def test_legacy_call_without_task_runs_as_before(legacy: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=note_job())
    result = await legacy.call_tool("kb_addnote", {"text": "x", "collection": "memory", "tags": ["prefs"]})
    assert result.structured_content["job_id"] == 8


def test_ids_survive_another_bridge_with_the_same_configuration(tmp_path: Path) -> None:
    from kb_bridge.credentials.secret import Secret

    key = {"engine": {"api_key": Secret("engine-key-0123456789abcdef")}}
    one, other = make_settings(tmp_path, **key), make_settings(tmp_path / "other", **key)
    ref = TaskRef("local", "kb_addnote", 3, {"job_id": 3}, "2026-01-01T00:00:00Z")
    assert decode(encode(ref, task_key(one)), task_key(other)) == ref


def test_each_shared_secret_signs_ids_and_oauth_without_one_signs_with_a_made_key(tmp_path: Path) -> None:
    """The key comes from what no caller knows. OAuth in front of a keyless engine once signed with the engine
    URL's digest, which anyone can compute (and so sign a task id naming any job); now with a random key. Without
    auth the URL's key stays: every caller is the one anonymous principal, and any host answers any task."""
    import hashlib

    from kb_bridge.credentials.named_tokens import NamedToken
    from kb_bridge.credentials.secret import Secret
    from kb_bridge.settings import OAuthSettings

    bare = make_settings(tmp_path)
    assert task_key(bare) == hashlib.sha256(f"kb-bridge task ids v1\0{bare.engine.url}".encode()).digest()
    oauth = {"oauth": OAuthSettings(issuer="https://issuer.example", public_url="https://kb.example")}
    alone = make_settings(tmp_path, mcp=oauth)
    assert alone.shares_no_secret and task_key(alone) != task_key(bare)
    elsewhere = make_settings(tmp_path, mcp=oauth, engine={"url": "http://127.0.0.1:9"})
    assert task_key(elsewhere) == task_key(alone)  # this process's own key: nothing of the configuration in it
    assert not make_settings(tmp_path, mcp=oauth, engine={"api_key": Secret("engine-key-0123456789abcdef")}).shares_no_secret

    def token(digest: bytes) -> NamedToken:
        return NamedToken("ci", digest, frozenset({"kb:read"}), None)

    by_file = [make_settings(tmp_path, mcp={"named_tokens": (token(b"a" * 32),)}) for _ in range(2)]
    assert task_key(by_file[0]) == task_key(by_file[1]) != task_key(bare)
    assert task_key(by_file[0]) != task_key(make_settings(tmp_path, mcp={"named_tokens": (token(b"b" * 32),)}))
    by_key = make_settings(tmp_path, mcp={**oauth, "task_key": Secret("t" * 32)})
    assert task_key(by_key) == task_key(make_settings(tmp_path, mcp={**oauth, "task_key": Secret("t" * 32)}))


def test_a_token_added_to_the_tokens_file_keeps_the_key_when_a_secret_no_caller_knows_is_set(tmp_path: Path) -> None:
    """Adding or removing a named token (read again at a SIGHUP) must not change the key when the engine key, the
    metrics token or the task key already keeps ids unforgeable; without any of them the digests still count."""
    from kb_bridge.credentials.named_tokens import NamedToken
    from kb_bridge.credentials.secret import Secret

    one = (NamedToken("a", b"a" * 32, frozenset({"kb:read"}), None),)
    two = (*one, NamedToken("b", b"b" * 32, frozenset({"kb:read"}), None))
    for steady in ({"engine": {"api_key": Secret("engine-key-0123456789abcdef")}},
                   {"mcp": {"metrics_token": Secret("metrics-token-0123456789abcdef")}},
                   {"mcp": {"task_key": Secret("t" * 32)}}):
        part, values = next(iter(steady.items()))

        def keyed(tokens: tuple[NamedToken, ...], part: str = part, values: dict[str, Any] = values) -> bytes:
            extra = {"named_tokens": tokens} if part == "engine" else {}
            mcp = {**values, "named_tokens": tokens} if part == "mcp" else extra
            return task_key(make_settings(tmp_path, **({part: values, "mcp": mcp} if part == "engine" else {"mcp": mcp})))

        assert keyed(one) == keyed(two)
    with_api_key = {"api_keys": (Secret("agent-key-0123456789abcdef"),)}
    assert (task_key(make_settings(tmp_path, mcp={**with_api_key, "named_tokens": one}))
            != task_key(make_settings(tmp_path, mcp={**with_api_key, "named_tokens": two})))  # agents know their key


def test_gunicorn_gives_its_workers_a_made_key_only_for_oauth_without_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kb_bridge.serving.gunicorn import gunicorn_options
    from kb_bridge.settings import load_settings

    monkeypatch.delenv("KB_MCP_TASK_KEY", raising=False)
    monkeypatch.setenv("KB_UPLOAD_DIR", str(tmp_path / "uploads"))
    monkeypatch.setenv("KB_METRICS", "false")
    gunicorn_options()
    assert "KB_MCP_TASK_KEY" not in os.environ  # no auth: the URL's key
    monkeypatch.setenv("KB_OAUTH_ISSUER", "https://issuer.example")
    monkeypatch.setenv("KB_PUBLIC_URL", "https://kb.example")
    monkeypatch.setenv("KB_API_KEY", "engine-key-0123456789abcdef")
    gunicorn_options()
    assert "KB_MCP_TASK_KEY" not in os.environ  # the key is derived from KB_API_KEY

    monkeypatch.delenv("KB_API_KEY")
    gunicorn_options()
    made = os.environ["KB_MCP_TASK_KEY"]
    worker = load_settings()  # what each worker reads after the fork
    assert worker.mcp.task_key is not None and worker.mcp.task_key.reveal() == made
    assert task_key(worker) == task_key(load_settings()) != task_key(make_settings(tmp_path))
    gunicorn_options()
    assert os.environ["KB_MCP_TASK_KEY"] == made  # loading the configuration again keeps the server's key


# --- who may read a task (tools/tasks.py, without MCP) ---------------------------------------------------


def test_a_task_is_unknown_to_another_principal_and_outside_a_limited_ones_reach(
    bridge: Bridge, engine: responses.RequestsMock,
) -> None:
    from kb_bridge.auth.principal import Principal
    from kb_bridge.tools import tasks
    from kb_bridge.tools.spec import ToolContext

    engine.get(f"{API}/jobs/8", json=note_job())  # files into memory
    ref = TaskRef(Principal("alice").owner, "kb_addnote", 8, {"job_id": 8, "status": "queued"}, "2026-01-01T00:00:00Z")

    def context(principal: Principal) -> ToolContext:
        return ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=principal)

    assert tasks.read(context(Principal("alice")), ref).status == tasks.WORKING
    with pytest.raises(tasks.UnknownTask):
        tasks.read(context(Principal("bob")), ref)
    with pytest.raises(tasks.UnknownTask):  # the same name, now limited to documents: the memory job is out of reach
        tasks.read(context(Principal("alice", collections=frozenset({"documents"}))), ref)
    with pytest.raises(tasks.UnknownTask):
        tasks.cancel(context(Principal("bob")), ref)
    # One OAuth subject's tokens own tasks by their reach: a read-only token neither reads nor cancels the task.
    writer = Principal("carol", scopes=frozenset({"kb:read", "kb:write"}), kind="oauth")
    theirs = TaskRef(writer.owner, "kb_addnote", 8, {"job_id": 8, "status": "queued"}, "2026-01-01T00:00:00Z")
    assert tasks.read(context(writer), theirs).status == tasks.WORKING
    for act in (tasks.read, tasks.cancel):
        with pytest.raises(tasks.UnknownTask):
            act(context(Principal("carol", scopes=frozenset({"kb:read"}), kind="oauth")), theirs)
    assert not calls_to(engine, "DELETE", "/jobs/8")


def test_a_large_note_tasks_hints_need_kb_read_and_the_collection_when_read_again(
    bridge: Bridge, engine: responses.RequestsMock,
) -> None:
    """A tokens-file entry keeps its tasks when the file narrows it (its owner is its name), and a note may move:
    the hints, other notes' titles and text, were searched again in the collection the task was made in for any
    caller who still owned it, without kb:read or a view of that collection."""
    from kb_bridge.auth.principal import Principal
    from kb_bridge.tools import tasks
    from kb_bridge.tools.spec import ToolContext

    hint = chunk(77, 31, text="the door code is 4711", score=0.9, title="door")
    engine.get(f"{API}/jobs/8", json=job(8, status="done", document_id=55, tags=["collection:memory"]))
    engine.get(f"{API}/documents/55", json=document(55, content="the note's text", tags=["collection:documents"]))
    engine.post(f"{API}/search", json=search_response(hint, mode="vector"))
    reference = {"job_id": 8, "collection": "memory", "duplicate_of": None, "hinted": True}
    ref = TaskRef(Principal("agent", kind="token").owner, "kb_addnote", 8, reference, "2026-01-01T00:00:00Z", whole=False)

    def similar(principal: Principal) -> list[dict[str, Any]]:
        context = ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=principal)
        state = tasks.read(context, ref)
        assert state.result is not None
        return list(state.result["similar"])

    assert [s["document_id"] for s in similar(Principal("agent", kind="token"))] == [31]
    assert similar(Principal("agent", scopes=frozenset({"kb:write"}), kind="token")) == []  # kb:read taken away
    assert similar(Principal("agent", collections=frozenset({"documents"}), kind="token")) == []  # memory taken away
    assert len(calls_to(engine, "POST", "/search")) == 1


async def test_an_engine_failure_while_reading_is_a_protocol_error_to_retry(modern: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=note_job())
    engine.get(f"{API}/jobs/8", status=503, json={"error": {"code": "not_ready", "message": "starting"}})
    created = await create_task(modern, "kb_addnote", {"text": "x", "collection": "memory", "tags": ["prefs"]})
    with pytest.raises(MCPError) as failed:
        await task_request(modern.session, "tasks/get", created.task_id)
    assert failed.value.error.code == types.INTERNAL_ERROR and "ENGINE_UNAVAILABLE" in failed.value.error.message


@pytest.mark.parametrize("tool", ["kb_status", "kb_delete"])
async def test_legacy_task_augmented_call_to_a_tool_without_task_support_is_method_not_found(
    legacy: Client, engine: responses.RequestsMock, tool: str,
) -> None:
    """2025-11-25 (basic/utilities/tasks, tool-level negotiation): a tool whose `execution.taskSupport` is absent
    MUST NOT be called as a task, and the server SHOULD answer -32601. Before, the call ran as a plain call (a
    kb_delete deleted) and answered a CallToolResult where the client waits for a CreateTaskResult."""
    with pytest.raises(MCPError) as caught:
        await raw(legacy, "tools/call", name=tool, arguments={"id": 5} if tool == "kb_delete" else {}, task={"ttl": 60000})
    assert caught.value.error.code == types.METHOD_NOT_FOUND and tool in caught.value.error.message
    assert not engine.calls  # nothing ran


async def test_legacy_task_augmented_call_that_fails_before_any_job_is_an_error_not_a_call_tool_result(
    legacy: Client, engine: responses.RequestsMock,
) -> None:
    """2025-11-25: a requestor that asked for a task reads the answer as a CreateTaskResult (the TypeScript SDK
    client, and so Inspector and Claude Code, threw a schema error, `expected object` at `task`, and the tool's own
    message was lost). A call that fails before any job exists creates no task: it is a JSON-RPC error carrying
    the tool's error, -32602 for arguments the tool refused."""
    with pytest.raises(MCPError) as caught:
        await raw(legacy, "tools/call", name="kb_addnote", arguments={"text": "", "collection": "memory"}, task={"ttl": 60000})
    assert caught.value.error.code == types.INVALID_PARAMS
    assert caught.value.error.message.startswith("VALIDATION_ERROR: text")
    assert caught.value.error.data["code"] == "VALIDATION_ERROR" and caught.value.error.data["field"] == "text"
    assert not engine.calls


async def test_legacy_task_augmented_call_whose_engine_fails_before_any_job_is_an_internal_error(
    legacy: Client, engine: responses.RequestsMock,
) -> None:
    engine.post(f"{API}/jobs", status=503, json={"error": {"code": "unavailable", "message": "down"}})
    with pytest.raises(MCPError) as caught:
        await raw(legacy, "tools/call", name="kb_addnote", arguments={"text": "x", "collection": "memory"}, task={})
    assert caught.value.error.code == types.INTERNAL_ERROR and caught.value.error.data["code"] == "OUTCOME_UNKNOWN"  # its message says to check before retrying
