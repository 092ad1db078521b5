"""The compose profile `postgres` as real processes: PostgreSQL with pgvector, two engine replicas sharing it
behind a round-robin balancer, and kb-bridge under gunicorn in front. (No Docker here: tests/test_deploy.py
checks the compose file itself; this runs the same topology.) Notes written through the bridge land on
either replica and are found through the bridge, whichever replica answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from kb_bridge.testing.balancer import RoundRobin
from kb_bridge.testing.mcp_http import modern_call
from kb_bridge.testing.postgres import PostgresServer
from kb_bridge.testing.processes import Service, start_bridge, start_engine
from kb_bridge.testing.processes import ENGINE_KEY

TOKEN = "postgres-profile-token-0123456789"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Service, list[Service], RoundRobin]]:
    server = PostgresServer().start()
    started: list[Service] = []
    balancer = None
    try:
        url = server.new_database()
        env = {"KB_API_KEY": ENGINE_KEY, "KB_ENGINE_DATABASE_URL": url, "KB_ENGINE_EMBEDDER": "none"}
        started += [start_engine(tmp_path, tmp_path / name, env) for name in ("engine-1", "engine-2")]
        balancer = RoundRobin([("127.0.0.1", int(e.url.rsplit(":", 1)[1])) for e in started])
        bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": balancer.url, "KB_API_KEY": ENGINE_KEY,
                                         "KB_MCP_API_KEY": TOKEN}, workers=2)
        started.append(bridge)
        yield bridge, started[:2], balancer
    finally:
        for service in reversed(started):
            service.stop()
        if balancer is not None:
            balancer.close()
        server.stop()


def test_two_replicas_behind_the_bridge_answer_a_search(stack: tuple[Service, list[Service], RoundRobin]) -> None:
    bridge, engines, balancer = stack
    ids = []
    for i in range(6):
        reply = modern_call(bridge.url, TOKEN, "kb_addnote",
                            {"text": f"Avocets sweep their upturned bills through mud, note {i}", "wait": True})
        ids.append(reply["result"]["structuredContent"]["document_id"])  # type: ignore[index]
    reply = modern_call(bridge.url, TOKEN, "kb_search", {"query": "avocets upturned bills", "top": 10})
    found = {hit["document_id"] for hit in reply["result"]["structuredContent"]["results"]}  # type: ignore[index]
    assert found == set(ids)
    for engine in engines:  # both replicas serve, and each sees every note
        listing = requests.get(f"{engine.url}/api/v1/documents", headers={"X-API-Key": ENGINE_KEY}, timeout=30).json()
        assert listing["total"] == 6
    assert balancer.connections >= 1  # the bridge's keep-alive connections may all land on one replica
