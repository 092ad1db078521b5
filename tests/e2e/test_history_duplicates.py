"""End to end, on SQLite and on PostgreSQL (two engine replicas sharing one database behind a round-robin
balancer): the official MCP client → kb-bridge under gunicorn (2 workers) → the real local engine with the
bundled model. A note's history (kept, listed, read, restored, pruned by KB_ENGINE_KEEP_VERSIONS, deleted
with it, never searched), exact duplicates refused (also when sent at the same moment), and near-duplicate
hints."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from mcp import Client

from kb_bridge.auth.principal import caller_id
from kb_bridge.credentials.secret import Secret
from kb_bridge.testing.balancer import RoundRobin
from kb_bridge.testing.postgres import PostgresServer
from kb_bridge.testing.mcp_client import call, connect, error_of
from kb_bridge.testing.processes import ENGINE_KEY, Service, start_bridge, start_engine, wait_until

pytestmark = pytest.mark.anyio

TOKEN = "history-token-e2e-0123456789abcdef"
KEEP = 3


class Stack:
    def __init__(self, bridge: Service, engines: list[Service]) -> None:
        self.bridge = bridge
        self.engines = engines

    def engine_get(self, path: str, engine: int = 0) -> requests.Response:
        return requests.get(f"{self.engines[engine].url}/api/v1{path}", headers={"X-API-Key": ENGINE_KEY}, timeout=30)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp: Path = tmp_path_factory.mktemp(f"history-{request.param}")
    started: list[Service] = []
    server = balancer = None
    env = {"KB_API_KEY": ENGINE_KEY, "KB_ENGINE_KEEP_VERSIONS": str(KEEP), "KB_ENGINE_WAIT_FOR_MODEL": "1"}
    try:
        if request.param == "postgresql":
            server = PostgresServer().start()
            env["KB_ENGINE_DATABASE_URL"] = server.new_database()
            started += [start_engine(tmp, tmp / name, env) for name in ("engine-1", "engine-2")]
            balancer = RoundRobin([("127.0.0.1", int(e.url.rsplit(":", 1)[1])) for e in started])
            engine_url = balancer.url
        else:
            started.append(start_engine(tmp, tmp / "data", env))
            engine_url = started[0].url
        engines = list(started)
        bridge = start_bridge(tmp, {"KB_ENGINE_URL": engine_url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_API_KEY": TOKEN},
                              workers=2)
        started.append(bridge)
        yield Stack(bridge, engines)
    finally:
        for service in reversed(started):
            service.stop()
        if balancer is not None:
            balancer.close()
        if server is not None:
            server.stop()




async def test_history_is_kept_listed_read_and_restored(stack: Stack) -> None:
    async with connect(stack.bridge.url, TOKEN) as client:
        added = await call(client, "kb_addnote", {"text": "The depot code is walrus.", "collection": "history",
                                                  "wait": True})
        doc = added["document_id"]
        await call(client, "kb_update_note", {"document_id": doc, "text": "The depot code is narwhal."})
        await call(client, "kb_update_note", {"document_id": doc, "title": "Depot code"})
        got = (await call(client, "kb_get", {"document_id": doc}))["documents"][0]
        assert [v["version"] for v in got["versions"]] == [3, 2, 1]
        assert {v["changed_by"] for v in got["versions"]} == {caller_id(Secret(TOKEN))}
        assert all(v["updated_at"] for v in got["versions"])

        first = (await call(client, "kb_get", {"document_id": doc, "version": 1}))["documents"][0]
        assert first["content"] == "The depot code is walrus." and first["version"] == 1 and first["chunks"] == []
        text = (await client.call_tool("kb_get", {"document_id": doc})).content[0].text
        assert "Versions of #" in text and "v1 " in text

        # Restoring is an update with the old text, guarded by the version read.
        assert await error_of(client, "kb_update_note", {"document_id": doc, "text": first["content"],
                                                         "expected_version": 2}) == "CONFLICT"
        restored = await call(client, "kb_update_note", {"document_id": doc, "text": first["content"],
                                                         "expected_version": 3})
        assert restored["version"] == 4
        now = (await call(client, "kb_get", {"document_id": doc}))["documents"][0]
        assert now["content"] == "The depot code is walrus." and [v["version"] for v in now["versions"]] == [4, 3, 2, 1]

        # Search only ever finds the current version.
        for mode in ("fts", "vector"):
            narwhal = await call(client, "kb_search", {"query": "narwhal", "collection": "history", "mode": mode})
            assert all("narwhal" not in hit["text"] for hit in narwhal["results"])
        walrus = await call(client, "kb_search", {"query": "walrus", "collection": "history", "mode": "fts"})
        assert [hit["document_id"] for hit in walrus["results"]] == [doc]


async def test_keep_versions_prunes_and_delete_removes_history(stack: Stack) -> None:
    async with connect(stack.bridge.url, TOKEN) as client:
        doc = (await call(client, "kb_addnote", {"text": "draft 1", "collection": "pruned", "wait": True}))["document_id"]
        for n in range(2, 7):
            await call(client, "kb_update_note", {"document_id": doc, "text": f"draft {n}"})
        got = (await call(client, "kb_get", {"document_id": doc}))["documents"][0]
        assert [v["version"] for v in got["versions"]] == [6, 5, 4, 3]  # the current one and KEEP before it
        assert await error_of(client, "kb_get", {"document_id": doc, "version": 2}) == "NOT_FOUND"
        assert (await call(client, "kb_get", {"document_id": doc, "version": 3}))["documents"][0]["content"] == "draft 3"

        assert (await call(client, "kb_delete", {"document_id": doc}))["deleted"] is True
        assert await error_of(client, "kb_get", {"document_id": doc, "version": 3}) == "NOT_FOUND"
        for engine in range(len(stack.engines)):
            assert stack.engine_get(f"/documents/{doc}/versions", engine).status_code == 404


async def test_an_exact_duplicate_answers_the_note_already_kept(stack: Stack) -> None:
    async with connect(stack.bridge.url, TOKEN) as client:
        first = await call(client, "kb_addnote", {"text": "Fire drill every first Friday.", "collection": "dupes",
                                                  "wait": True})
        again = await call(client, "kb_addnote", {"text": "  Fire drill\n every first   Friday. ",
                                                  "collection": "dupes"})
        assert again["duplicate_of"] == first["document_id"] and again["job_id"] == first["job_id"]
        assert again["document_id"] == first["document_id"] and again["similar"] == []
        text = (await client.call_tool("kb_addnote", {"text": "Fire drill every first Friday.",
                                                      "collection": "dupes"})).content[0].text
        assert "kb_update_note" in text and f"#{first['document_id']}" in text
        forced = await call(client, "kb_addnote", {"text": "Fire drill every first Friday.", "collection": "dupes",
                                                   "allow_duplicate": True, "wait": True})
        assert forced["duplicate_of"] is None and forced["document_id"] != first["document_id"]
        listed = await call(client, "kb_list", {"collection": "dupes"})
        assert len(listed["documents"]) == 2


async def test_identical_adds_at_the_same_moment_make_one_document(stack: Stack) -> None:
    text = f"Identical notes racing {stack.bridge.url}"

    async def add(client: Client) -> dict[str, Any]:
        return await call(client, "kb_addnote", {"text": text, "collection": "race", "wait": True})

    async with connect(stack.bridge.url, TOKEN) as one, connect(stack.bridge.url, TOKEN) as two:
        answers = await asyncio.gather(*(add(client) for client in (one, two) for _ in range(4)))
    assert len({answer["document_id"] for answer in answers}) == 1
    assert sum(answer["duplicate_of"] is None for answer in answers) == 1
    listing = stack.engine_get("/documents?tag=collection:race").json()
    assert listing["total"] == 1


def test_identical_notes_sent_to_two_replicas_at_once_make_one_job(stack: Stack) -> None:
    if len(stack.engines) < 2:
        pytest.skip("one engine on SQLite (one process per data directory); the race across it is above")
    body = {"text": "Two replicas, one note.", "tags": ["collection:replicas"], "unique_in": "collection:replicas"}

    def post(engine: Service) -> requests.Response:
        return requests.post(f"{engine.url}/api/v1/jobs", json=body, headers={"X-API-Key": ENGINE_KEY}, timeout=30)

    for _ in range(5):  # several rounds, each a new text, so the two requests truly overlap at least once
        body["text"] = f"Two replicas, one note. {time.monotonic_ns()}"
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(post, stack.engines))
        assert sorted(answer.status_code for answer in answers) == [200, 202]
        assert answers[0].json()["id"] == answers[1].json()["id"]


async def test_a_paraphrase_is_added_with_a_similar_hint(stack: Stack) -> None:
    async with connect(stack.bridge.url, TOKEN) as client:
        first = await call(client, "kb_addnote", {"text": "The staging database password rotates every 30 days.",
                                                  "collection": "hints", "wait": True})
        para = await call(client, "kb_addnote", {"text": "Every thirty days the staging DB password is changed.",
                                                 "collection": "hints", "wait": True})
        assert para["duplicate_of"] is None and para["document_id"] != first["document_id"]
        assert [s["document_id"] for s in para["similar"]] == [first["document_id"]]
        hint = para["similar"][0]
        assert hint["score"] >= 0.6 and "password" in hint["snippet"] and hint["title"]
        other = await call(client, "kb_addnote", {"text": "The cafeteria serves soup on Mondays.",
                                                  "collection": "hints", "wait": True})
        assert other["similar"] == []
        elsewhere = await call(client, "kb_addnote", {"text": "Every thirty days the staging DB password is changed.",
                                                      "collection": "other-hints", "wait": True})
        assert elsewhere["similar"] == [] and elsewhere["duplicate_of"] is None  # another collection


def test_the_engines_report_3_9_or_later(stack: Stack) -> None:
    wait_until(lambda: stack.engine_get("/status").ok, 30, what="engine status")
    version = tuple(int(part) for part in stack.engine_get("/status").json()["version"].split("."))
    assert version >= (3, 9, 0)
