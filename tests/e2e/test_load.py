"""Load and abuse, bounded versions (reliability checklist 39-41); bench/abuse.py has the full-size
runs and their figures. Each test asserts behaviour (served, matched, overlapped, bounded), not
speed."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.e2e.mcp_client import MODERN_META, modern_call
from tests.e2e.processes import Service, connections_of, start_bridge, wait_until
from tests.e2e.standin import StandInEngine

TOKEN = "agent-token-load-0123456789abcdef"


@pytest.fixture
def slow_engine() -> Iterator[StandInEngine]:
    with StandInEngine(delay=0.1, gate=64) as engine:
        yield engine


def worker_rss_kib(bridge: Service) -> dict[int, int]:
    pids = Path(f"/proc/{bridge.process.pid}/task/{bridge.process.pid}/children").read_text().split()
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


async def _open_and_call(port: int, count: int) -> tuple[list[tuple[str, str]], list[asyncio.StreamWriter]]:
    """`count` clients, each on its own connection, each sending one call and never closing."""

    async def one(i: int) -> tuple[tuple[str, str], asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        query = f"client-{i}"
        body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                           "params": {"name": "kb_search", "arguments": {"query": query}, "_meta": MODERN_META}}).encode()
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            f"MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: kb_search\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        writer.write(head + body)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 60)
        length = 0
        while (line := await asyncio.wait_for(reader.readline(), 60)) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        reply = json.loads(await asyncio.wait_for(reader.readexactly(length), 60))
        assert status_line.startswith(b"HTTP/1.1 200"), status_line
        return (query, reply["result"]["structuredContent"]["query"] if reply["id"] == i else f"wrong id {reply['id']}"), writer

    results = await asyncio.gather(*(one(i) for i in range(count)))
    return [r for r, _ in results], [w for _, w in results]


def test_40_many_clients_that_never_close_get_their_own_answers_in_bounded_memory(tmp_path: Path) -> None:
    with StandInEngine() as engine:
        bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN, "KB_KEEPALIVE": "120"}, workers=2)
        port = int(bridge.url.rsplit(":", 1)[1])
        try:
            modern_call(bridge.url, TOKEN, "kb_search", {"query": "warm"})
            before = worker_rss_kib(bridge)

            async def run() -> tuple[list[tuple[str, str]], dict[int, int]]:
                pairs, writers = await _open_and_call(port, 300)
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


def _slowloris(port: int, stop: threading.Event, body: bool) -> None:
    """Headers (or a body) dripped one byte at a time, never finished."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            request = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            if body:
                request += "Content-Length: 100000\r\n\r\n{"
            for char in request.encode():
                if stop.is_set():
                    return
                sock.send(bytes([char]))
                stop.wait(0.05)  # the drip rate is the attack
            while not stop.wait(0.2):
                sock.send(b" ")
    except OSError:
        return  # the server may cut a slow client off: that is allowed


def test_39_slow_clients_do_not_starve_the_others(tmp_path: Path) -> None:
    with StandInEngine() as engine:
        bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN}, workers=1)
        port = int(bridge.url.rsplit(":", 1)[1])
        stop = threading.Event()
        drippers = [threading.Thread(target=_slowloris, args=(port, stop, i % 2 == 0), daemon=True) for i in range(60)]
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
