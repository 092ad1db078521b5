"""Load and abuse, bounded versions (reliability checklist 39-41); bench/abuse.py has the full-size
runs and their figures. Each test asserts behaviour (served, matched, overlapped, bounded), not
speed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from kb_bridge.testing.abuse import open_and_call, raw_search_call, slowloris
from kb_bridge.testing.mcp_http import modern_call
from kb_bridge.testing.processes import Service, connections_of, start_bridge, wait_until, worker_pids
from kb_bridge.testing.standin import StandInEngine

TOKEN = "agent-token-load-0123456789abcdef"


@pytest.fixture
def slow_engine() -> Iterator[StandInEngine]:
    with StandInEngine(delay=0.1, gate=64) as engine:
        yield engine


def worker_rss_kib(bridge: Service) -> dict[int, int]:
    pids = worker_pids(bridge)
    rss = {}
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss[int(pid)] = int(line.split()[1])
    return rss


def test_41_64_concurrent_calls_on_a_slow_engine_overlap_and_none_is_lost(slow_engine: StandInEngine, tmp_path: Path) -> None:
    # A pool of 64 per worker: however the kernel spreads the 64 connections over the 2 workers,
    # every call can be in flight at once, and the engine holds them until all 64 are.
    env = {"KB_ENGINE_URL": slow_engine.url, "KB_MCP_API_KEY": TOKEN, "KB_THREAD_POOL_SIZE": "64", "KB_ENGINE_POOL_SIZE": "64"}
    bridge = start_bridge(tmp_path, env, workers=2)
    try:
        with ThreadPoolExecutor(64) as pool:
            replies = list(pool.map(lambda i: modern_call(bridge.url, TOKEN, "kb_search", {"query": f"q{i}"}, timeout=30), range(64)))
    finally:
        bridge.stop()
    assert all("result" in r and not r["result"].get("isError") for r in replies)
    assert sorted(r["result"]["structuredContent"]["query"] for r in replies) == sorted(f"q{i}" for i in range(64))
    # The calls ran side by side, not one after another: all 64 reached the engine together.
    assert slow_engine.peak_in_flight == 64


def test_40_many_clients_that_never_close_get_their_own_answers_in_bounded_memory(tmp_path: Path) -> None:
    with StandInEngine() as engine:
        bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN, "KB_KEEPALIVE": "120"}, workers=2)
        port = int(bridge.url.rsplit(":", 1)[1])
        try:
            modern_call(bridge.url, TOKEN, "kb_search", {"query": "warm"})
            before = worker_rss_kib(bridge)

            async def run() -> tuple[list[tuple[str, str]], dict[int, int]]:
                pairs, writers = await open_and_call(port, TOKEN, 300)
                during = worker_rss_kib(bridge)  # every connection still open
                for writer in writers:
                    writer.close()
                return pairs, during

            pairs, during = asyncio.run(run())
        finally:
            bridge.stop()
    assert all(sent == got for sent, got in pairs), [p for p in pairs if p[0] != p[1]][:5]
    growth_mib = max(during[pid] - before.get(pid, during[pid]) for pid in during) / 1024
    assert growth_mib < 64, f"a worker grew by {growth_mib:.1f} MiB holding 300 idle connections"


def test_39_slow_clients_do_not_starve_the_others(tmp_path: Path) -> None:
    with StandInEngine() as engine:
        bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN}, workers=1)
        port = int(bridge.url.rsplit(":", 1)[1])
        stop = threading.Event()
        drippers = [threading.Thread(target=slowloris, args=(port, stop, i % 2 == 0), daemon=True) for i in range(60)]
        try:
            for thread in drippers:
                thread.start()
            (worker,) = worker_rss_kib(bridge)
            wait_until(lambda: connections_of(worker, port) >= 60, 30, what="the slow clients to be connected")
            replies = [modern_call(bridge.url, TOKEN, "kb_search", {"query": f"normal-{i}"}, timeout=10) for i in range(20)]
        finally:
            stop.set()
            for thread in drippers:
                thread.join(10)
            bridge.stop()
    assert [r["result"]["structuredContent"]["query"] for r in replies] == [f"normal-{i}" for i in range(20)]



def test_connections_per_worker_are_bounded(tmp_path: Path) -> None:
    """KB_MAX_CONNECTIONS bounds what a worker holds open: beyond it the oldest connection without a request
    in progress is closed to make room, so idle clients never lock out a new one; only when every connection
    has a request in progress is a new request answered 503. (The default uvicorn worker; gunicorn's own ASGI
    worker counts connections but, in gunicorn 27, does not enforce the bound: the README says so.)"""
    with StandInEngine(delay=3.0) as engine:
        env = {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN, "KB_KEEPALIVE": "120", "KB_MAX_CONNECTIONS": "20"}
        bridge = start_bridge(tmp_path, env, workers=1)
        port = int(bridge.url.rsplit(":", 1)[1])
        try:
            (worker,) = worker_pids(bridge)

            async def idle_clients() -> tuple[list[int | str], int]:
                statuses: list[int | str] = []
                writers = []
                try:
                    for i in range(30):  # one after another, each left open after its answer
                        reader, writer = await asyncio.open_connection("127.0.0.1", port)
                        writers.append(writer)
                        statuses.append(await _call_and_status(reader, writer, port, i, engine))
                    held = connections_of(int(worker), port)
                finally:
                    for writer in writers:
                        writer.close()
                return statuses, held

            engine.delay = 0.0
            statuses, held = asyncio.run(idle_clients())
            engine.delay = 3.0
            with ThreadPoolExecutor(20) as pool:
                busy = [pool.submit(_status_of_one_call, bridge.url) for _ in range(20)]
                wait_until(lambda: engine.in_flight == 20, 30, what="20 calls in progress")
                beyond = _status_of_one_call(bridge.url)
                finished = [f.result(60) for f in busy]
        finally:
            bridge.stop()
    assert statuses == [200] * 30, statuses  # idle clients were closed to make room, not the new ones refused
    assert held <= 20, held
    assert finished == [200] * 20 and beyond == 503


async def _call_and_status(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int, i: int, engine: StandInEngine) -> int | str:
    writer.write(raw_search_call(port, TOKEN, i, f"idle-{i}"))
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 10)
    # The body is left unread: the connection stays open and idle, which is the point.
    return int(status_line.split()[1]) if status_line else "closed"


def _status_of_one_call(url: str) -> int:
    try:
        modern_call(url, TOKEN, "kb_search", {"query": "probe"}, timeout=10)
    except requests.HTTPError as exc:
        return exc.response.status_code
    return 200
