"""Issue 38 items 2 and 3 across real processes: two bridges (gunicorn, two workers and one) in front of one
real local engine whose queue the test holds (tests/e2e/held_engine.py). A note and an upload finish run as
tasks made on one bridge and read, resolved and cancelled on the other (no bridge process holds a task),
through the official Python client (2026-07-28, the io.modelcontextprotocol/tasks extension) and the
TypeScript SDK client (2025-11-25 experimental tasks); waiting calls send progress notifications."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import requests
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from kb_bridge.testing.processes import REPO, Service, free_port, start_bridge, wait_until, worker_pids
from kb_bridge.testing.processes import require
from kb_bridge.testing.held_engine import HeldEngine
from kb_bridge.testing.tasks_client import TasksExtension, create_task, task_request, until_ended
from kb_bridge.settings import load_settings
from kb_bridge.tools.task_ids import MAX_ID_CHARS, decode, task_key

pytestmark = pytest.mark.anyio

ENGINE_KEY = "engine-key-tasks-0123456789abcdef"
TOKEN = "agent-token-tasks-0123456789abcdef"
TS = REPO / "tests" / "ts"


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeldEngine]:
    engine = HeldEngine(tmp_path_factory.mktemp("held-engine") / "data", ENGINE_KEY)
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def bridges(held: HeldEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Service]]:
    tmp = tmp_path_factory.mktemp("task-bridges")
    # The same configuration (so the same task-id key) and one staging directory both bridges see.
    env = {"KB_ENGINE_URL": held.url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_API_KEY": TOKEN, "KB_UPLOAD_DIR": str(tmp / "uploads")}
    first = start_bridge(tmp, env, workers=2)
    try:
        second = start_bridge(tmp, env, workers=1)
    except BaseException:
        first.stop()
        raise
    yield first, second
    second.stop()
    first.stop()


@asynccontextmanager
async def connect(url: str, tasks: bool = True) -> AsyncIterator[Client]:
    """The official Python client (2026-07-28), declaring the tasks extension unless `tasks` is False."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as http:
        extensions = [TasksExtension()] if tasks else []
        async with Client(streamable_http_client(url + "/mcp", http_client=http), extensions=extensions) as client:
            yield client


def engine_job(held: HeldEngine, job_id: int) -> dict[str, Any]:
    response = requests.get(f"{held.url}/api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {ENGINE_KEY}"}, timeout=30)
    response.raise_for_status()
    return dict(response.json())


def job_of(held: HeldEngine, task_id: str) -> int:
    """The engine job a task id carries, opened with the key the bridges derive from their shared secrets."""
    settings = load_settings({"KB_ENGINE_URL": held.url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_API_KEY": TOKEN})
    ref = decode(task_id, task_key(settings))
    assert ref is not None and ref.job_id is not None
    return ref.job_id


async def test_python_client_tasks_across_two_bridges(held: HeldEngine, bridges: tuple[Service, Service]) -> None:
    one, other = bridges
    gate = held.hold()
    try:
        async with connect(one.url) as made_on, connect(other.url) as read_on, connect(other.url, tasks=False) as plain:
            kept = await create_task(made_on, "kb_addnote", {"text": "The albatross glides for hours without a flap.",
                                                             "collection": "memory", "wait": True})
            dropped = await create_task(made_on, "kb_addnote", {"text": "A note taken back before it runs.", "collection": "memory"})
            started = await made_on.call_tool("kb_upload_start", {"filename": "petrels.txt", "total_size": 28})
            upload_id = started.structured_content["upload_id"]
            await made_on.call_tool("kb_upload_chunk", {"upload_id": upload_id, "chunk_index": 0,
                                                        "data": base64.b64encode(b"Storm petrels walk on water.").decode()})
            filed = await create_task(made_on, "kb_upload_finish", {"upload_id": upload_id})
            assert {kept.status, dropped.status, filed.status} == {"working"}

            # Read and cancel on the other bridge while the engine holds every job in its queue.
            working = await task_request(read_on.session, "tasks/get", kept.task_id)
            assert working["status"] == "working" and working["statusMessage"].endswith("is queued")
            assert (await task_request(read_on.session, "tasks/cancel", dropped.task_id))["resultType"] == "complete"
            assert (await task_request(read_on.session, "tasks/get", dropped.task_id))["status"] == "cancelled"
            assert engine_job(held, job_of(held, dropped.task_id))["status"] == "cancelled"

            # A waiting call reports the job's stages on its own stream; the queue opens once it waits.
            seen: list[tuple[float, str]] = []

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                seen.append((value, message or ""))

            waited: dict[str, Any] = {}

            async def wait_for_note() -> None:
                result = await plain.call_tool("kb_addnote", {"text": "Shearwaters nest in burrows.", "wait": True},
                                               progress_callback=on_progress)
                waited.update(result.structured_content or {})

            async with anyio.create_task_group() as group:
                group.start_soon(wait_for_note)
                with anyio.fail_after(60):
                    while not seen:
                        await anyio.sleep(0.05)
                gate.set()
            assert waited["status"] == "done" and isinstance(waited["document_id"], int)
            assert seen[0][1].endswith("is queued") and seen[-1] == (100.0, f"job {waited['job_id']} is done")
            assert [value for value, _ in seen] == sorted({value for value, _ in seen})

            done = await until_ended(read_on.session, kept.task_id)
            assert done["status"] == "completed" and isinstance(done["result"]["structuredContent"]["document_id"], int)
            filed_done = await until_ended(made_on.session, filed.task_id)
            assert filed_done["result"]["structuredContent"]["status"] == "done"
            # A cancel once it ended is acknowledged and changes nothing.
            await task_request(made_on.session, "tasks/cancel", kept.task_id)
            assert (await task_request(made_on.session, "tasks/get", kept.task_id))["status"] == "completed"
            # The client's extension resolves a task by itself: a plain call_tool answers the final result.
            resolved = await read_on.call_tool("kb_addnote", {"text": "Gannets dive from thirty metres.", "collection": "memory"})
            assert resolved.structured_content["status"] == "done"
            updated = await create_task(made_on, "kb_update_note", {"document_id": resolved.structured_content["document_id"],
                                                                    "title": "Gannets"})
            assert updated.status == "completed"
            read_back = await task_request(read_on.session, "tasks/get", updated.task_id)
            assert read_back["result"]["structuredContent"]["title"] == "Gannets"
    finally:
        gate.set()


def node_plan(node: str, url: str, steps: list[dict[str, Any]], tmp: Path, name: str) -> subprocess.Popen[str]:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps({"transport": {"kind": "http", "url": url + "/mcp", "token": TOKEN}, "steps": steps}))
    return subprocess.Popen([node, str(TS / "client.mjs"), str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str], lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    return lines + [json.loads(line) for line in out.splitlines()]


def test_typescript_client_tasks_across_two_bridges(held: HeldEngine, bridges: tuple[Service, Service], tmp_path: Path) -> None:
    node = require("node")
    one, other = bridges
    gate = held.hold()
    try:
        made = finish(node_plan(node, one.url, [
            {"method": "listTools"},
            {"method": "createTask", "name": "kb_addnote", "arguments": {"text": "Puffins carry ten fish at once.", "collection": "memory"}},
            {"method": "createTask", "name": "kb_addnote", "arguments": {"text": "A note the TS client takes back."}},
            {"method": "callTool", "name": "kb_upload_start", "arguments": {"filename": "terns.txt", "total_size": 21}},
            {"method": "callTool", "name": "kb_upload_chunk", "arguments": {"upload_id": "$3.structuredContent.upload_id", "chunk_index": 0,
                                                                          "data": base64.b64encode(b"Arctic terns migrate.").decode()}},
            {"method": "createTask", "name": "kb_upload_finish", "arguments": {"upload_id": "$3.structuredContent.upload_id"}},
        ], tmp_path, "made"), [])
        assert all(line["ok"] for line in made), made
        tools = {tool["name"]: tool for tool in made[0]["result"]["tools"]}
        assert tools["kb_addnote"]["execution"] == {"taskSupport": "optional"}
        note, dropped, filed = (made[i]["result"]["task"] for i in (1, 2, 5))
        assert {note["status"], dropped["status"], filed["status"]} == {"working"}

        process = node_plan(node, other.url, [
            {"method": "getTask", "taskId": note["taskId"]},  # 0
            {"method": "cancelTask", "taskId": dropped["taskId"]},  # 1
            {"method": "getTask", "taskId": dropped["taskId"]},  # 2
            {"method": "callToolWithProgress", "name": "kb_addnote", "arguments": {"text": "Skuas chase gulls.", "wait": True}},  # 3
            {"method": "taskResult", "taskId": note["taskId"]},  # 4
            {"method": "taskResult", "taskId": filed["taskId"]},  # 5
            {"method": "cancelTask", "taskId": note["taskId"]},  # 6: it ended
            {"method": "callToolStream", "name": "kb_addnote", "arguments": {"text": "Fulmars spit oil.", "collection": "memory"}},  # 7
        ], tmp_path, "read")
        assert process.stdout is not None
        early = [json.loads(process.stdout.readline()) for _ in range(3)]  # the queue still holds
        wait_until(lambda: any(j["status"] == "queued" and j["id"] > job_of(held, filed["taskId"]) for j in queued(held)), 30,
                   what="the waiting call's job")
        gate.set()
        outputs = finish(process, early)
        assert all(line["ok"] for i, line in enumerate(outputs) if i != 6), outputs
        assert outputs[0]["result"]["status"] == "working"
        assert outputs[1]["result"]["status"] == "cancelled" and outputs[2]["result"]["status"] == "cancelled"
        waited = outputs[3]["result"]
        assert waited["structuredContent"]["status"] == "done"
        messages = [p["message"] for p in waited["progress"]]
        assert messages[0].endswith("is queued") and messages[-1].endswith("is done"), messages
        assert outputs[4]["result"]["structuredContent"]["status"] == "done"
        assert outputs[4]["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"] == note["taskId"]
        assert outputs[5]["result"]["structuredContent"]["filename"] == "terns.txt"
        assert outputs[6]["error"]["code"] == -32602
        stream = [m["type"] for m in outputs[7]["result"]["messages"]]
        assert stream[0] == "taskCreated" and stream[-1] == "result", stream
    finally:
        gate.set()


def queued(held: HeldEngine) -> list[dict[str, Any]]:
    response = requests.get(f"{held.url}/api/v1/jobs", params={"status": "queued"},
                            headers={"Authorization": f"Bearer {ENGINE_KEY}"}, timeout=30)
    return list(response.json()["jobs"])


def post(url: str, method: str, params: dict[str, Any], name: str | None, token: str | None = TOKEN,
         request_id: str | None = None) -> dict[str, Any]:
    """One raw 2026-07-28 request declaring the tasks extension, with its routing headers (no Authorization
    without a `token`; `request_id` names the request in the bridge's log)."""
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "kb-tests", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if request_id is not None:
        headers["X-Request-Id"] = request_id
    if name is not None:
        headers["Mcp-Name"] = name
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    return dict(requests.post(url + "/mcp", json=body, headers=headers, timeout=60).json())


def test_routing_headers_name_the_task(bridges: tuple[Service, Service]) -> None:
    one, other = bridges
    created = post(one.url, "tools/call", {"name": "kb_addnote", "arguments": {"text": "Kittiwakes nest on cliffs."}}, "kb_addnote")
    task_id = created["result"]["taskId"]
    assert created["result"]["resultType"] == "task" and "result" not in created["result"]
    got = post(other.url, "tasks/get", {"taskId": task_id}, task_id)
    assert got["result"]["taskId"] == task_id and got["result"]["resultType"] == "complete"
    assert post(other.url, "tasks/get", {"taskId": task_id}, None)["result"]["taskId"] == task_id
    mismatched = post(other.url, "tasks/get", {"taskId": task_id}, "another-task")
    assert mismatched["error"]["code"] == -32020


def test_a_large_update_task_id_is_short_opaque_and_read_on_the_other_bridge(bridges: tuple[Service, Service]) -> None:
    """The review's case over HTTP: a 500-character title and 20 tags of 200 once made a 35 KB id, sent in the
    Mcp-Name header of every poll (over nginx's 8 KB default), its base64 holding the title and the tags."""
    one, other = bridges
    title, tags = "é" * 500, [("é" * 190) + f"{i:03d}" for i in range(20)]
    made = post(one.url, "tools/call", {"name": "kb_addnote", "arguments": {"text": "Petrels follow ships."}}, "kb_addnote")
    noted = made["result"]["taskId"]
    wait_until(lambda: post(other.url, "tasks/get", {"taskId": noted}, noted)["result"]["status"] == "completed", 60,
               what="the note's task")
    document_id = post(other.url, "tasks/get", {"taskId": noted}, noted)["result"]["result"]["structuredContent"]["document_id"]
    updated = post(one.url, "tools/call", {"name": "kb_update_note",
                                           "arguments": {"document_id": document_id, "title": title, "tags": tags}}, "kb_update_note")
    task_id = updated["result"]["taskId"]
    assert len(task_id) <= MAX_ID_CHARS
    raw = base64.urlsafe_b64decode(task_id + "=" * (-len(task_id) % 4))
    assert "é".encode() * 10 not in raw and b"\\u00e9" not in raw and b"memory" not in raw and b"documents" not in raw
    got = post(other.url, "tasks/get", {"taskId": task_id}, task_id)["result"]
    assert got["status"] == "completed"
    assert {key: got["result"]["structuredContent"][key] for key in ("id", "title", "tags")} == {"id": document_id, "title": title, "tags": tags}
    too_long = "A" * (MAX_ID_CHARS + 1)
    assert post(other.url, "tasks/get", {"taskId": too_long}, too_long)["error"]["code"] == -32602


def test_oauth_without_any_secret_signs_with_a_key_its_workers_share_and_no_caller_knows(tmp_path: Path) -> None:
    """OAuth in front of a keyless engine holds no secret to sign task ids with. They were once signed with a key
    derived from the engine's URL alone, which any caller can compute, so a token could sign an id naming any job;
    now gunicorn's master makes a random key before its workers start: both workers answer a task either of them
    made, and an id signed with the URL's key is unknown."""
    from kb_bridge.testing.oauth_server import AuthServer
    from kb_bridge.testing.processes import start_engine
    from kb_bridge.auth.principal import Principal
    from kb_bridge.tools.task_ids import TaskRef, encode

    engine = start_engine(tmp_path, tmp_path / "data")
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    auth = AuthServer(audience=public + "/mcp").start()
    try:
        bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": engine.url, "KB_OAUTH_ISSUER": auth.issuer,
                                         "KB_PUBLIC_URL": public}, workers=2, port=port)
        try:
            token = auth.token(sub="task-maker")
            created = post(bridge.url, "tools/call", {"name": "kb_addnote", "arguments": {"text": "Gannets dive."}},
                           "kb_addnote", token=token)
            task_id = created["result"]["taskId"]
            answered_by: set[int] = set()

            def both_workers_answered() -> bool:
                rid = f"task-read-{len(answered_by)}-{free_port()}"
                got = post(bridge.url, "tasks/get", {"taskId": task_id}, task_id, token=token, request_id=rid)
                assert got.get("result", {}).get("taskId") == task_id, got  # never "unknown task" on either worker
                answered_by.update(entry["pid"] for entry in log_entries(bridge) if entry.get("request_id") == rid)
                return len(answered_by) == 2

            wait_until(both_workers_answered, timeout=60, what="tasks/get answered by both workers")

            guessable = hashlib.sha256(f"kb-bridge task ids v1\0{engine.url}".encode()).digest()
            owner = Principal("task-maker", scopes=frozenset({"kb:read", "kb:write", "kb:delete"}), kind="oauth").owner
            job_id = max(j["id"] for j in requests.get(f"{engine.url}/api/v1/jobs", timeout=30).json()["jobs"])
            forged = encode(TaskRef(owner, "kb_addnote", job_id, {}, "2026-01-01T00:00:00Z"), guessable)
            refused = post(bridge.url, "tasks/get", {"taskId": forged}, forged, token=token)
            assert refused["error"]["code"] == -32602 and "unknown task" in refused["error"]["message"].lower()
        finally:
            bridge.stop()
    finally:
        auth.stop()
        engine.stop()


def log_entries(service: Service) -> list[dict[str, Any]]:
    return [json.loads(line) for line in service.log_path.read_text().splitlines() if line.startswith("{")]


def test_a_task_made_before_a_sighup_that_reloads_an_edited_tokens_file_is_still_answered(held: HeldEngine, tmp_path: Path) -> None:
    """A token added to (or removed from) KB_MCP_TOKENS_FILE takes effect at a SIGHUP: gunicorn starts new
    workers, which read the file again. Task ids were sealed with a key that digested every token of the file, so
    the reload made every task made before it unknown (-32602): its answer lost, though its engine job went on.
    With the engine's key configured, that key alone keeps ids unforgeable, and the file's tokens stay out of it."""
    import signal

    writer = "named-writer-" + "w" * 32
    added = "named-added-" + "a" * 32

    def entry(name: str, token: str) -> str:
        return (f'[[token]]\nname = "{name}"\nsha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
                'scopes = ["kb:read", "kb:write"]\n')

    tokens_file = tmp_path / "tokens.toml"
    tokens_file.write_text(entry("writer", writer))
    tokens_file.chmod(0o600)
    bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": held.url, "KB_API_KEY": ENGINE_KEY,
                                     "KB_MCP_TOKENS_FILE": str(tokens_file)}, workers=1)
    try:
        created = post(bridge.url, "tools/call", {"name": "kb_addnote", "arguments": {"text": "Shearwaters glide."}},
                       "kb_addnote", token=writer)
        task_id = created["result"]["taskId"]
        assert post(bridge.url, "tasks/get", {"taskId": task_id}, task_id, token=writer)["result"]["taskId"] == task_id
        before = set(worker_pids(bridge))
        tokens_file.write_text(entry("writer", writer) + entry("added", added))
        bridge.signal(signal.SIGHUP)

        def reloaded() -> bool:  # new workers serve, the old ones are gone, and they know the added token
            pids = set(worker_pids(bridge))
            if not pids or pids & before:
                return False
            answer = post(bridge.url, "tools/call", {"name": "kb_status", "arguments": {}}, "kb_status", token=added)
            return "result" in answer

        wait_until(reloaded, 60, what="new workers that read the edited tokens file")
        got = post(bridge.url, "tasks/get", {"taskId": task_id}, task_id, token=writer)
    finally:
        bridge.stop()
    assert got.get("result", {}).get("taskId") == task_id, got
