"""Sync tool handlers run on the bounded thread pool, concurrently (not on asgiref's one shared thread)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
import responses
from mcp import Client

from kb_bridge.protocol.server import build_server
from kb_bridge.runtime import Bridge
from kb_bridge.testing.fake_engine import API, make_settings
from kb_bridge.testing.fake_engine import search_response

pytestmark = pytest.mark.anyio


async def test_eight_calls_to_a_slow_engine_overlap(tmp_path: Path, engine: responses.RequestsMock, era: str) -> None:
    # The fake engine answers only once all 8 requests are inside it at the same time: if the
    # bridge ran them one after another, the barrier would time out and every call would fail.
    barrier = threading.Barrier(8, timeout=10)

    def slow_engine(request: Any) -> tuple[int, dict[str, str], str]:
        barrier.wait()
        return 200, {}, json.dumps(search_response())

    engine.add_callback(responses.POST, f"{API}/search", callback=slow_engine)
    bridge = Bridge(make_settings(tmp_path, mcp={"thread_pool_size": 8}))
    results: list[Any] = []
    async with Client(build_server(bridge), mode=era) as client:

        async def one() -> None:
            results.append(await client.call_tool("kb_search", {"query": "q"}))

        async with anyio.create_task_group() as group:
            for _ in range(8):
                group.start_soon(one)
    assert len(results) == 8 and not any(r.is_error for r in results)


async def test_the_pool_bounds_concurrency(tmp_path: Path, engine: responses.RequestsMock) -> None:
    inside, peak, lock = [0], [0], threading.Lock()
    release = threading.Event()

    def counting_engine(request: Any) -> tuple[int, dict[str, str], str]:
        with lock:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
            if inside[0] == 3:
                release.set()
        release.wait(10)
        with lock:
            inside[0] -= 1
        return 200, {}, json.dumps(search_response())

    engine.add_callback(responses.POST, f"{API}/search", callback=counting_engine)
    bridge = Bridge(make_settings(tmp_path, mcp={"thread_pool_size": 3}))
    async with Client(build_server(bridge)) as client:
        async with anyio.create_task_group() as group:
            for _ in range(9):
                group.start_soon(client.call_tool, "kb_search", {"query": "q"})
    assert peak[0] == 3
