"""The bridge's stdio transport: the (read, write) stream pair the MCP server runs on, over stdin and stdout.

- Two daemon threads read stdin and write stdout (protocol/stdio_wire.py). Nothing waits for them to end, so
  Ctrl-C stops the process at once instead of when the next line arrives.
- Each line becomes a message, or is answered at once with a JSON-RPC error (protocol/stdio_frames.py).
- At the end of stdin, reading stops but the session goes on until every request read has been answered
  (protocol/stdio_answers.py): an MCP client ends a stdio session by closing stdin and waiting for the server to
  exit, and JSON-RPC owes each request an answer. At most `drain_seconds` (the longest a tool call may take,
  Settings.longest_tool_call); then the server's read stream closes and the server, stopping, answers what is
  still running "Connection closed".
- A closed stdout (the client gone) stops everything and raises StdoutClosed; so does a client that closed stdin
  but does not read stdout, once the last answers have waited `LAST_WRITE_SECONDS` past the drain to be written.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.lowlevel import EventLoopToken
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types import INVALID_REQUEST, ErrorData, JSONRPCError, JSONRPCRequest

from kb_bridge.protocol import stdio_wire
from kb_bridge.protocol.stdio_answers import Answers, Outstanding
from kb_bridge.protocol.stdio_frames import Ignored, Refused, read_frame

logger = logging.getLogger(__name__)

# What a thread's call into the event loop raises once the loop is stopping or gone (anyio's RunFinishedError
# is a RuntimeError; a call the loop's shutdown cancelled ends in concurrent.futures.CancelledError, or in
# asyncio's own when a second Ctrl-C stops asyncio.run's graceful shutdown).
LOOP_GONE = (RuntimeError, concurrent.futures.CancelledError, asyncio.CancelledError)


# After the drain, how long the last answers (the "Connection closed" ones included) may wait for the client to
# read stdout: a client that closed stdin and never reads would otherwise hold the process for ever.
LAST_WRITE_SECONDS = 5.0


class StdoutClosed(Exception):
    """The client closed the pipe the bridge answers on, or stopped reading it: nobody is left to answer."""

    def __init__(self, message: str = "the client closed stdout; stopped") -> None:
        super().__init__(message)
        self.message = message


@asynccontextmanager
async def stdio_transport(wire: stdio_wire.Wire, drain_seconds: float, max_line_bytes: int
                          ) -> AsyncIterator[tuple[MemoryObjectReceiveStream[SessionMessage], Answers]]:
    """The (read, write) streams the MCP server runs on; StdoutClosed once it has stopped, if that is why."""
    token = anyio.lowlevel.current_token()
    outstanding = Outstanding()
    lines_in, lines = anyio.create_memory_object_stream[bytes | None]()
    inbound_send, inbound = anyio.create_memory_object_stream[SessionMessage]()
    outbound, outbound_receive = anyio.create_memory_object_stream[SessionMessage]()
    written = anyio.Event()
    stdin_ended = anyio.Event()
    stdout_closed = stdout_stalled = False
    async with anyio.create_task_group() as tasks:

        def writer_done(finished: bool) -> None:
            nonlocal stdout_closed
            if finished:
                written.set()
                return
            stdout_closed = True
            outbound_receive.close()  # the server's last answers fail at once instead of waiting for a reader
            tasks.cancel_scope.cancel()

        async def give_up_on_stdout() -> None:
            nonlocal stdout_stalled
            await stdin_ended.wait()
            await anyio.sleep(drain_seconds + LAST_WRITE_SECONDS)
            stdout_stalled = True  # the writer is still blocked: the client does not read what it is owed
            tasks.cancel_scope.cancel()

        _daemon("kb-stdio-in", _read_stdin, wire.stdin, max_line_bytes, lines_in, token)
        _daemon("kb-stdio-out", _write_stdout, outbound_receive, wire.stdout, token, writer_done)
        reading = anyio.CancelScope()
        watchdog = anyio.CancelScope()
        tasks.start_soon(_within, watchdog, give_up_on_stdout)
        tasks.start_soon(_pump, reading, lines, inbound_send, outbound.clone(), outstanding, drain_seconds,
                         max_line_bytes, stdin_ended)
        answers = Answers(outbound, outstanding)
        yield inbound, answers
        # The server stopped: the pump had closed its read stream, so it is done, unless the server stopped early.
        reading.cancel()
        await answers.aclose()
        await written.wait()  # every answer taken is on stdout
        watchdog.cancel()
    if stdout_closed:
        raise StdoutClosed
    if stdout_stalled:
        logger.warning("stdout not read for %.0f s after stdin closed: exiting with answers unwritten",
                       drain_seconds + LAST_WRITE_SECONDS)
        raise StdoutClosed("the client stopped reading stdout; stopped")


async def _within(scope: anyio.CancelScope, task: Callable[[], Any]) -> None:
    with scope:
        await task()


async def _pump(scope: anyio.CancelScope, lines: MemoryObjectReceiveStream[bytes | None],
                inbound: MemoryObjectSendStream[SessionMessage], refusals: MemoryObjectSendStream[SessionMessage],
                outstanding: Outstanding, drain_seconds: float, max_line_bytes: int, stdin_ended: anyio.Event) -> None:
    """stdin's lines to the server, or their refusals to stdout; at the end of stdin, the drain."""
    with scope:
        async with lines, inbound, refusals:
            try:
                async for line in lines:
                    if line is None:  # over the limit, dropped as it was read (stdio_wire.lines)
                        await _refuse_oversized(refusals, max_line_bytes)
                    else:
                        await _forward(line, inbound, refusals, outstanding)
            except anyio.BrokenResourceError:
                return  # the server stopped reading: there is nothing left to drain
            stdin_ended.set()
            if outstanding:
                logger.info("stdin closed: answering the %d request(s) under way before exiting", len(outstanding))
            with anyio.move_on_after(drain_seconds):
                await outstanding.all_answered()
            if outstanding:
                logger.warning("%d request(s) still unanswered %.0f s after stdin closed: they are stopped and "
                               "answered \"Connection closed\"", len(outstanding), drain_seconds)


async def _refuse_oversized(refusals: MemoryObjectSendStream[SessionMessage], max_line_bytes: int) -> None:
    """A line longer than a request body may be over HTTP (KB_MCP_MAX_BODY_BYTES): -32600 with id null, as the
    HTTP door answers 413; its id was never read."""
    message = f"Invalid Request: a message longer than KB_MCP_MAX_BODY_BYTES ({max_line_bytes} bytes)"
    logger.warning("refused a line on stdin: %s", message)
    await refusals.send(SessionMessage(JSONRPCError(jsonrpc="2.0", id=None,
                                                    error=ErrorData(code=INVALID_REQUEST, message=message))))


async def _forward(line: bytes, inbound: MemoryObjectSendStream[SessionMessage],
                   refusals: MemoryObjectSendStream[SessionMessage], outstanding: Outstanding) -> None:
    frame = read_frame(line)
    if frame is None:
        return
    if isinstance(frame, Refused):
        logger.warning("refused a line on stdin: %s", frame.reason)
        await refusals.send(SessionMessage(frame.answer))
    elif isinstance(frame, Ignored):
        logger.warning("ignored a line on stdin: %s", frame.reason)
    elif isinstance(frame, JSONRPCRequest):
        outstanding.read(frame.id)
        # The server calls the hook for a request it settles with no answer (one the client cancelled).
        await inbound.send(SessionMessage(frame, ServerMessageMetadata(on_request_unanswered=outstanding.hook(frame.id))))
    else:
        await inbound.send(SessionMessage(frame))


def _read_stdin(fd: int, max_line_bytes: int, lines: MemoryObjectSendStream[bytes | None],
                token: EventLoopToken) -> None:
    """On its own daemon thread: stdin's lines into the event loop, one at a time, until stdin ends."""
    try:
        for line in stdio_wire.lines(fd, max_line_bytes):
            anyio.from_thread.run(lines.send, line, token=token)
    except OSError as exc:
        logger.warning("could not read stdin (%s): taken as its end", exc)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, *LOOP_GONE):
        return  # the transport is done with stdin
    with suppress(*LOOP_GONE):
        anyio.from_thread.run_sync(lines.close, token=token)


def _write_stdout(messages: MemoryObjectReceiveStream[SessionMessage], fd: int, token: EventLoopToken,
                  done: Callable[[bool], None]) -> None:
    """On its own daemon thread: each message from the event loop as one line on stdout, until every sender is
    done (`done(True)`) or stdout is closed (`done(False)`)."""
    try:
        while True:
            message = anyio.from_thread.run(messages.receive, token=token).message
            stdio_wire.write_all(fd, message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n")
    except anyio.EndOfStream:
        finished = True
    except OSError:  # EPIPE: the client closed its end
        finished = False
    except (anyio.ClosedResourceError, *LOOP_GONE):
        return
    with suppress(*LOOP_GONE):
        anyio.from_thread.run_sync(done, finished, token=token)


def _daemon(name: str, target: Callable[..., None], *args: Any) -> None:
    threading.Thread(target=target, args=args, name=name, daemon=True).start()
