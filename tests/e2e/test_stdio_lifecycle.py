"""`kb-bridge stdio` as a real process: every request read before stdin closes is answered before the process
exits, a line that is not a JSON-RPC request is answered with an error instead of ignored, Ctrl-C and a closed
stdout end the process at once and quietly (docs/protocol.md, "stdio")."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kb_bridge.testing.processes import REPO, clean_env, wait_until
from kb_bridge.testing.standin import StandInEngine

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
NOTE_JOB = {"id": 41, "type": "note", "status": "queued", "document_id": None, "tags": []}


def call(request_id: Any, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def ping(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "ping"}


def notes_engine(method: str, path: str) -> tuple[int, Any] | None:
    """The stand-in takes a new note (a queued job); its other answers are its own."""
    return (202, NOTE_JOB) if (method, path) == ("POST", "/api/v1/jobs") else None


@pytest.fixture
def engine() -> Iterator[StandInEngine]:
    with StandInEngine(delay=0.5) as stand_in:  # every call is still running when stdin closes
        stand_in.custom = notes_engine
        yield stand_in


class StdioBridge:
    """`python -m kb_bridge stdio`, its stdout and stderr read line by line on threads as they come."""

    def __init__(self, engine_url: str, read_stdout: bool = True, hold_stdout: bool = False,
                 env: dict[str, str] | None = None) -> None:
        env = clean_env({"KB_ENGINE_URL": engine_url, "KB_ENGINE_RETRIES": "1", **(env or {})})
        self.process = subprocess.Popen([sys.executable, "-m", "kb_bridge", "stdio"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=REPO)
        assert self.process.stdin is not None and self.process.stdout is not None and self.process.stderr is not None
        self.stdin = self.process.stdin
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        self._readers = [threading.Thread(target=self._collect, args=(self.process.stderr, self.err), daemon=True)]
        if read_stdout:
            self._readers.append(threading.Thread(target=self._collect, args=(self.process.stdout, self.out), daemon=True))
        elif hold_stdout:
            pass  # the client keeps its end open and never reads it: the bridge's writes block once the pipe is full
        else:
            self.process.stdout.close()  # the client is gone: the bridge's next write finds no reader
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _collect(stream: Any, into: list[bytes]) -> None:
        for line in iter(stream.readline, b""):
            into.append(line)

    def send(self, *messages: dict[str, Any] | bytes) -> None:
        for message in messages:
            self.stdin.write(message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n")
        self.stdin.flush()

    def replies(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in list(self.out)]  # every line on stdout is JSON-RPC

    def reply_to(self, request_id: Any) -> dict[str, Any]:
        found = [reply for reply in self.replies() if reply.get("id") == request_id and "method" not in reply]
        assert len(found) == 1, (request_id, self.replies())
        return found[0]

    def wait_for_exit(self, timeout: float) -> int:
        status = self.process.wait(timeout)
        for reader in self._readers:
            reader.join(10)
        return status

    def stderr(self) -> str:
        return b"".join(self.err).decode("utf-8", "replace")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def bridge(engine: StandInEngine) -> Iterator[StdioBridge]:
    started = StdioBridge(engine.url)
    yield started
    started.kill()


def test_every_request_read_before_stdin_closes_is_answered_before_the_process_exits(
        bridge: StdioBridge, engine: StandInEngine) -> None:
    bridge.send(INIT, INITIALIZED, call(2, "kb_addnote", {"text": "written as stdin closes", "collection": "documents"}),
                ping(3), ping(4), ping(5))
    bridge.stdin.close()  # the MCP way to end a stdio session: close stdin, wait for the server to exit

    assert bridge.wait_for_exit(60) == 0, bridge.stderr()
    assert sorted(reply["id"] for reply in bridge.replies()) == [1, 2, 3, 4, 5]
    added = bridge.reply_to(2)["result"]
    assert not added.get("isError") and added["structuredContent"]["job_id"] == NOTE_JOB["id"], added
    assert "POST /api/v1/jobs" in engine.received


def test_a_slow_call_under_way_when_stdin_closes_is_answered_before_the_process_exits(
        bridge: StdioBridge, engine: StandInEngine) -> None:
    engine.delay = 3.0
    bridge.send(INIT, INITIALIZED, call(2, "kb_search", {"query": "slow", "mode": "fts"}))
    wait_until(lambda: any("/api/v1/search" in seen for seen in engine.received), 30, what="the search under way")
    bridge.stdin.close()

    assert bridge.wait_for_exit(60) == 0, bridge.stderr()
    searched = bridge.reply_to(2)["result"]
    assert not searched.get("isError"), searched


def test_a_request_the_client_cancelled_is_not_waited_for(bridge: StdioBridge, engine: StandInEngine) -> None:
    engine.delay = 3.0
    bridge.send(INIT, INITIALIZED, call(2, "kb_search", {"query": "cancelled", "mode": "fts"}),
                call(3, "kb_search", {"query": "kept", "mode": "fts"}))
    wait_until(lambda: sum("/api/v1/search" in seen for seen in engine.received) == 2, 30, what="both searches under way")
    bridge.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}})
    bridge.stdin.close()

    # A cancelled request gets no answer (MCP), so the end of stdin waits only for the other one, not for the
    # drain's deadline (minutes away).
    assert bridge.wait_for_exit(30) == 0, bridge.stderr()
    assert [reply["id"] for reply in bridge.replies()] == [1, 3]
    assert not bridge.reply_to(3)["result"].get("isError")


def test_a_line_that_is_not_utf8_is_a_parse_error_and_nothing_is_stored(bridge: StdioBridge, engine: StandInEngine) -> None:
    latin1 = (b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"kb_addnote",'
              b'"arguments":{"text":"caf\xe9 ocelot","collection":"documents"}}}\n')
    bridge.send(INIT, INITIALIZED, latin1, ping(3))
    wait_until(lambda: len(bridge.replies()) == 3, 30, what="three answers")
    bridge.stdin.close()

    assert bridge.wait_for_exit(60) == 0, bridge.stderr()
    refused = [reply for reply in bridge.replies() if reply.get("id") is None]
    assert [reply["error"]["code"] for reply in refused] == [-32700], bridge.replies()
    assert "result" in bridge.reply_to(3)
    assert not any("/api/v1/jobs" in seen for seen in engine.received)  # the note was not stored, mangled or not


def test_malformed_lines_and_requests_without_a_valid_id_are_answered_with_errors(
        bridge: StdioBridge, engine: StandInEngine) -> None:
    addnote = call(0, "kb_addnote", {"text": "sent with a bad id", "collection": "documents"})
    bad_ids = [{**addnote, "id": bad} for bad in (None, 1.5, True, {"n": 1})]
    bridge.send(INIT, INITIALIZED, b"{not json\n", b"[1,2]\n", b"5\n", {"id": 5, "method": "ping"}, *bad_ids, ping(9))
    wait_until(lambda: len(bridge.replies()) == 10, 30, what="ten answers")
    bridge.stdin.close()

    assert bridge.wait_for_exit(60) == 0, bridge.stderr()
    refused = [reply["error"]["code"] for reply in bridge.replies() if reply.get("id") is None]
    assert refused == [-32700, -32600, -32600, -32600, -32600, -32600, -32600], bridge.replies()
    assert bridge.reply_to(5)["error"]["code"] == -32600  # no "jsonrpc": "2.0", but its id is a valid one
    assert "result" in bridge.reply_to(9)
    assert not any("/api/v1/jobs" in seen for seen in engine.received)  # no request with a bad id ran


def test_ctrl_c_while_idle_ends_the_process_at_once(bridge: StdioBridge) -> None:
    bridge.send(INIT)
    wait_until(lambda: len(bridge.replies()) == 1, 30, what="the initialize answer")
    started = time.monotonic()
    bridge.process.send_signal(signal.SIGINT)  # stdin stays open: nothing else would end it

    assert bridge.wait_for_exit(10) == 130, bridge.stderr()
    assert time.monotonic() - started < 5
    assert "kb-bridge stdio: interrupted" in bridge.stderr()


def test_a_second_ctrl_c_while_a_call_finishes_its_engine_request_prints_no_traceback() -> None:
    with StandInEngine(delay=20) as engine:  # the engine never answers within the call's deadline
        bridge = StdioBridge(engine.url, env={"KB_ENGINE_TIMEOUT": "4"})
        try:
            bridge.send(INIT, INITIALIZED, call(2, "kb_search", {"query": "herons"}))
            wait_until(lambda: any("/search" in request for request in engine.received), 30, what="the engine call")
            bridge.process.send_signal(signal.SIGINT)
            wait_until(lambda: any(reply.get("id") == 2 for reply in bridge.replies()), 30, what="call 2 answered")
            bridge.process.send_signal(signal.SIGINT)  # the user presses Ctrl-C again while the request finishes
            status = bridge.wait_for_exit(60)
        finally:
            bridge.kill()
    stderr = bridge.stderr()
    assert status == 130, stderr
    assert "Exception in thread" not in stderr, stderr
    # every line is a log record (JSON) or the one line of the command: no traceback printed raw
    assert [line for line in stderr.splitlines() if not line.startswith("{")] == ["kb-bridge stdio: interrupted"], stderr


def test_ctrl_c_during_a_call_whose_engine_does_not_answer_ends_the_process_before_the_requests_deadline() -> None:
    # The bridge's stop waited for the call's engine request, and the interpreter for the pool's threads: Ctrl-C
    # took until KB_ENGINE_TIMEOUT (here 60 s; the stand-in answers after 120).
    with StandInEngine(delay=120) as engine:
        bridge = StdioBridge(engine.url, env={"KB_ENGINE_TIMEOUT": "60"})
        try:
            bridge.send(INIT, INITIALIZED, call(2, "kb_search", {"query": "herons"}))
            wait_until(lambda: any("/search" in request for request in engine.received), 30, what="the engine call")
            started = time.monotonic()
            bridge.process.send_signal(signal.SIGINT)
            status = bridge.wait_for_exit(90)
            took = time.monotonic() - started
        finally:
            bridge.kill()
    assert status == 130 and took < 30, (status, took)
    [answer] = [reply for reply in bridge.replies() if reply.get("id") == 2]
    assert answer["error"]["message"] == "Connection closed", answer
    assert [line for line in bridge.stderr().splitlines() if not line.startswith("{")] == ["kb-bridge stdio: interrupted"]


def test_a_client_that_closed_stdin_and_does_not_read_stdout_does_not_hold_the_process_for_ever(
        engine: StandInEngine) -> None:
    # The drain is 1.5 x 1 + 0 + 1.5 x 1 + 5 = 8 s here; then the last answers get LAST_WRITE_SECONDS to be read.
    bridge = StdioBridge(engine.url, read_stdout=False, hold_stdout=True,
                         env={"KB_ENGINE_TIMEOUT": "1", "KB_ENGINE_UPLOAD_TIMEOUT": "1", "KB_ADDNOTE_WAIT_SECONDS": "0"})
    try:
        bridge.send(INIT, INITIALIZED, *({"jsonrpc": "2.0", "id": n, "method": "tools/list"} for n in range(2, 200)))
        bridge.stdin.close()  # more answers than the pipe holds are owed, and nobody reads them
        status = bridge.wait_for_exit(60)
    finally:
        bridge.kill()
    stderr = bridge.stderr()
    assert status == 1, stderr
    assert stderr.splitlines()[-1] == "kb-bridge stdio: the client stopped reading stdout; stopped", stderr
    assert "Traceback" not in stderr, stderr


def test_a_closed_stdout_ends_the_process_with_one_line_on_stderr(engine: StandInEngine) -> None:
    bridge = StdioBridge(engine.url, read_stdout=False)
    try:
        bridge.send(INIT, INITIALIZED, ping(2))  # stdin stays open: only the failed write can end it
        status = bridge.wait_for_exit(30)
    finally:
        bridge.kill()
    stderr = bridge.stderr()
    assert status == 1, stderr
    assert stderr.splitlines()[-1] == "kb-bridge stdio: the client closed stdout; stopped", stderr
    assert "Traceback" not in stderr and "Error" not in stderr, stderr  # no ExceptionGroup of BrokenPipeErrors
