"""Abusive clients, shared by the load tests and bench/abuse.py: many connections that never
close, and slowloris connections that drip their headers or body."""

from __future__ import annotations

import asyncio
import json
import socket
import threading

from kb_bridge.testing.mcp_http import MODERN_META


def raw_search_call(port: int, token: str, call_id: int, query: str) -> bytes:
    """A complete HTTP/1.1 request for one 2026-07-28 kb_search call, to write on a raw connection."""
    body = json.dumps({"jsonrpc": "2.0", "id": call_id, "method": "tools/call",
                       "params": {"name": "kb_search", "arguments": {"query": query}, "_meta": MODERN_META}}).encode()
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: kb_search\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


async def open_and_call(port: int, token: str, count: int) -> tuple[list[tuple[str, str]], list[asyncio.StreamWriter]]:
    """`count` clients, each on its own connection, each sending one call and never closing."""

    async def one(i: int) -> tuple[tuple[str, str], asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        query = f"client-{i}"
        writer.write(raw_search_call(port, token, i, query))
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


def slowloris(port: int, stop: threading.Event, body: bool) -> None:
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
