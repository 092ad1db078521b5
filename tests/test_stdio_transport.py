"""The stdio transport in process, over pipes, with a stand-in for the MCP server: the end of stdin waits for the
answers still owed, and no longer than its deadline (protocol/stdio_transport.py). The real process is tested in
tests/e2e/test_stdio_lifecycle.py."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from unittest.mock import patch

import anyio
import pytest
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCRequest, JSONRPCResponse

from kb_bridge.protocol.stdio_transport import stdio_transport
from kb_bridge.protocol import stdio_wire
from kb_bridge.protocol.stdio_wire import Wire

pytestmark = pytest.mark.anyio

PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n'
LIMIT = 64 * 1024


@pytest.fixture
def pipes() -> Iterator[tuple[Wire, int, int]]:
    """The transport's wire, the client's end of stdin (to write) and of stdout (to read)."""
    stdin_read, stdin_write = os.pipe()
    stdout_read, stdout_write = os.pipe()
    yield Wire(stdin=stdin_read, stdout=stdout_write), stdin_write, stdout_read
    for fd in (stdin_read, stdin_write, stdout_read, stdout_write):
        try:
            os.close(fd)
        except OSError:
            pass


async def test_the_end_of_stdin_waits_for_an_answer_still_owed(pipes: tuple[Wire, int, int],
                                                               caplog: pytest.LogCaptureFixture) -> None:
    wire, client_in, client_out = pipes
    os.write(client_in, PING)
    os.close(client_in)
    caplog.set_level(logging.INFO, logger="kb_bridge.protocol.stdio_transport")
    with anyio.fail_after(20):
        async with stdio_transport(wire, drain_seconds=60, max_line_bytes=LIMIT) as (read_stream, write_stream):
            request = await read_stream.receive()
            while not any(r.getMessage().startswith("stdin closed") for r in caplog.records):
                await anyio.sleep(0.01)  # polled (within fail_after) until the transport has met the end of stdin
            await write_stream.send(SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=1, result={})))
            started = anyio.current_time()
            rest = [message async for message in read_stream]  # ends once the answer is out, not at 60 s
            ended = anyio.current_time() - started
            await write_stream.aclose()
    assert isinstance(request.message, JSONRPCRequest) and request.message.id == 1
    assert rest == [] and ended < 5
    assert json.loads(os.read(client_out, 65536)) == {"jsonrpc": "2.0", "id": 1, "result": {}}


async def test_the_end_of_stdin_waits_no_longer_than_its_deadline(pipes: tuple[Wire, int, int]) -> None:
    wire, client_in, _ = pipes
    os.write(client_in, PING)
    os.close(client_in)
    with anyio.fail_after(20):
        async with stdio_transport(wire, drain_seconds=1, max_line_bytes=LIMIT) as (read_stream, write_stream):
            started = anyio.current_time()
            received = [message async for message in read_stream]  # never answered: ends at the deadline
            waited = anyio.current_time() - started
            await write_stream.aclose()
    assert len(received) == 1 and 1 <= waited < 5


@pytest.mark.parametrize("split", [1, 4096, 1 << 20], ids=["byte by byte", "in pieces", "at once"])
def test_a_line_longer_than_the_limit_is_dropped_as_it_is_read_and_the_next_one_is_whole(split: int) -> None:
    """As HTTP caps a body at KB_MCP_MAX_BODY_BYTES: a longer line was held whole in memory (100 MB: a 541 MiB
    peak); now it is dropped as it arrives and stands as None, whatever pieces the pipe hands over."""
    data = b"x" * 200 + b"\n" + b"y" * 1000 + b"\n" + b"z" * 1001 + b"\n" + b"w" * 1500
    read, write = os.pipe()
    try:
        with open(write, "wb", closefd=False) as out:
            out.write(data)
        os.close(write)
        with patch.object(stdio_wire, "CHUNK", split):
            got = list(stdio_wire.lines(read, 1000))
    finally:
        os.close(read)
    assert got == [b"x" * 200, b"y" * 1000, None, None]


async def test_an_over_long_line_is_answered_invalid_request_and_the_next_is_served(pipes: tuple[Wire, int, int]) -> None:
    wire, client_in, client_out = pipes
    os.write(client_in, b'{"jsonrpc":"2.0","id":7,"method":"ping","params":{"x":"' + b"a" * 2000 + b'"}}\n' + PING)
    os.close(client_in)
    with anyio.fail_after(20):
        async with stdio_transport(wire, drain_seconds=1, max_line_bytes=1000) as (read_stream, write_stream):
            request = await read_stream.receive()
            await write_stream.send(SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=1, result={})))
            await write_stream.aclose()
    assert isinstance(request.message, JSONRPCRequest) and request.message.id == 1
    answers = [json.loads(line) for line in os.read(client_out, 65536).splitlines()]
    assert answers[0]["id"] is None and answers[0]["error"]["code"] == -32600
    assert "KB_MCP_MAX_BODY_BYTES" in answers[0]["error"]["message"] and answers[1] == {"jsonrpc": "2.0", "id": 1, "result": {}}
