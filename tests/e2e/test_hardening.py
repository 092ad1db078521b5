"""The bridge under gunicorn, attacked on loopback: 2,000 slow clients, links planted in the upload staging, a
staging directory others could write to, a finish whose local write fails after the engine job exists, an
engine that drips its answer, engine error bodies that quote secrets. Every load here is bounded in count
and time and stops itself."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from kb_bridge.auth.principal import caller_id
from kb_bridge.credentials.secret import Secret
from kb_bridge.testing.mcp_http import error_code, modern_call
from kb_bridge.testing.processes import REPO, Service, clean_env, free_port, start_bridge, wait_until
from kb_bridge.testing.standin import StandInEngine
from kb_bridge.testing.processes import ENGINE_KEY

TOKEN = "hardening-token-0123456789abcdef"


def port_of(service: Service) -> int:
    return int(service.url.rsplit(":", 1)[1])


# --- slow clients ----------------------------------------------------------------------------------------------


async def _hold_partial_heads(port: int, count: int, done: asyncio.Event) -> list[asyncio.StreamWriter]:
    """`count` connections that send part of a request head: half stop there, half drip a byte a second."""
    head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nX-Slow: ".encode()
    writers: list[asyncio.StreamWriter] = []

    async def one(i: int) -> None:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return
        writers.append(writer)
        try:
            writer.write(head)
            await writer.drain()
            while i % 2 and not done.is_set():
                writer.write(b"x")
                await writer.drain()
                await asyncio.wait_for(done.wait(), 1.0)
        except (OSError, asyncio.TimeoutError):
            if i % 2 and not done.is_set():
                await one(i)  # closed by the server: the attacker comes back
        except Exception:
            return

    tasks = [asyncio.create_task(one(i)) for i in range(count)]
    await asyncio.sleep(0)
    done.tasks = tasks  # type: ignore[attr-defined]
    return writers


def test_2000_slow_clients_do_not_stop_health_checks_or_calls(tmp_path: Path) -> None:
    """One worker, default settings: 2,000 sockets holding partial heads (half stalled, half dripping). /healthz
    answers 200 within 5 s and a tool call within 10 s; a stalled head and a stalled body are answered 408 or
    closed within 60 s; GET /mcp is 405."""
    with StandInEngine() as engine:
        bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN}, workers=1)
        port = port_of(bridge)

        async def scenario() -> dict[str, Any]:
            done = asyncio.Event()
            writers = await _hold_partial_heads(port, 2000, done)
            try:
                await asyncio.sleep(3)  # the sockets are open and sending: the attack is on
                started = time.monotonic()
                health = await asyncio.to_thread(requests.get, bridge.url + "/healthz", timeout=5)
                health_s = time.monotonic() - started
                started = time.monotonic()
                reply = await asyncio.to_thread(modern_call, bridge.url, TOKEN, "kb_search", {"query": "still served"}, 10)
                call_s = time.monotonic() - started
                get_mcp = await asyncio.to_thread(requests.get, bridge.url + "/mcp", timeout=5,
                                                  headers={"Authorization": f"Bearer {TOKEN}", "Accept": "text/event-stream"})
                head_s, head_answer = await asyncio.to_thread(_stalled, port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                body_s, body_answer = await asyncio.to_thread(
                    _stalled, port, f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
                    "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"".encode())
                return {"health": health.status_code, "health_s": health_s, "call": reply, "call_s": call_s,
                        "get_mcp": get_mcp.status_code, "head": (head_s, head_answer), "body": (body_s, body_answer)}
            finally:
                done.set()
                for task in getattr(done, "tasks", []):
                    task.cancel()
                for writer in writers:
                    writer.close()

        try:
            seen = asyncio.run(asyncio.wait_for(scenario(), 150))
        finally:
            bridge.stop()
    assert seen["health"] == 200 and seen["health_s"] < 5, seen
    assert seen["call"]["result"]["structuredContent"]["query"] == "still served" and seen["call_s"] < 10, seen
    assert seen["get_mcp"] == 405
    for stalled in ("head", "body"):
        seconds, answer = seen[stalled]
        assert seconds < 60 and (answer.startswith(b"HTTP/1.1 408") or answer == b""), (stalled, seconds, answer[:100])


def _stalled(port: int, partial: bytes) -> tuple[float, bytes]:
    """Send part of a request and stop: (seconds until the server answered or closed, what it sent)."""
    with socket.create_connection(("127.0.0.1", port), timeout=90) as sock:
        sock.sendall(partial)
        started = time.monotonic()
        try:
            answer = sock.recv(4096)
        except OSError:
            answer = b""
        return time.monotonic() - started, answer


# --- upload staging ------------------------------------------------------------------------------------------


def bridge_process(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The bridge as gunicorn runs it, expected to refuse to start."""
    full = clean_env({"KB_BIND": f"127.0.0.1:{free_port()}", "KB_WORKERS": "1", **env})
    return subprocess.run([sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "kb_bridge.asgi:app"],
                          env=full, cwd=REPO, capture_output=True, text=True, timeout=60)


def _unsafe_dirs(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    yield "world-writable", shared
    group = tmp_path / "group"
    group.mkdir()
    group.chmod(0o770)
    yield "group-writable", group
    link = tmp_path / "link"
    link.symlink_to(shared)
    yield "a symlink to a world-writable directory", link
    if os.geteuid() == 0:  # only root can give a directory away
        foreign = tmp_path / "foreign"
        foreign.mkdir(mode=0o700)
        os.chown(foreign, 65534, 65534)
        yield "owned by another user", foreign


def test_the_bridge_refuses_a_staging_directory_others_can_write(tmp_path: Path) -> None:
    for why, directory in _unsafe_dirs(tmp_path):
        done = bridge_process({"KB_UPLOAD_DIR": str(directory), "KB_ENGINE_URL": "http://127.0.0.1:9"}, tmp_path)
        assert done.returncode != 0 and "KB_UPLOAD_DIR" in done.stderr, (why, done.stderr[-1000:])


def test_the_staging_directory_is_made_0700_and_a_private_one_is_accepted(tmp_path: Path) -> None:
    with StandInEngine() as engine:
        made = tmp_path / "made" / "uploads"
        bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": engine.url, "KB_UPLOAD_DIR": str(made)}, workers=1)
        bridge.stop()
        assert made.stat().st_mode & 0o777 == 0o700
        private = tmp_path / "private"
        private.mkdir(mode=0o700)
        bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": engine.url, "KB_UPLOAD_DIR": str(private)}, workers=1)
        bridge.stop()


@pytest.fixture
def real_bridge(engine: Service, tmp_path: Path) -> Iterator[Service]:
    env = {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_API_KEY": TOKEN, "KB_UPLOAD_DIR": str(tmp_path / "staging")}
    service = start_bridge(tmp_path, env, workers=2)
    yield service
    service.stop()


def call(bridge: Service, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return dict(modern_call(bridge.url, TOKEN, tool, arguments)["result"])  # type: ignore[arg-type]


def engine_sources(engine: Service) -> list[str]:
    response = requests.get(engine.url + "/api/v1/documents", params={"limit": 500}, timeout=30,
                            headers={"Authorization": f"Bearer {ENGINE_KEY}"})
    return [d["source_path"] for d in response.json()["documents"]]


def test_a_chunk_planted_as_a_link_never_reaches_the_engine(engine: Service, real_bridge: Service, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"TOP SECRET: the agent must never see this file.\n")
    size = secret.stat().st_size
    upload_id = call(real_bridge, "kb_upload_start", {"filename": "innocent.txt", "total_size": size,
                                                       "source_path": "planted/innocent.txt"})["structuredContent"]["upload_id"]
    staged = tmp_path / "staging" / caller_id(Secret(TOKEN)) / upload_id
    (staged / "chunk-000000000.bin").symlink_to(secret)
    finish = call(real_bridge, "kb_upload_finish", {"upload_id": upload_id})
    again = call(real_bridge, "kb_upload_chunk", {"upload_id": upload_id, "chunk_index": 0,
                                                  "data": base64.b64encode(secret.read_bytes()).decode()})
    assert finish["isError"] and finish["structuredContent"]["error"]["code"] == "UPLOAD_INCOMPLETE"
    assert again["isError"] and again["structuredContent"]["error"]["code"] == "STORAGE_ERROR"
    assert "planted/innocent.txt" not in engine_sources(engine)
    assert secret.read_bytes().startswith(b"TOP SECRET")  # read nothing into it, wrote nothing to it


def test_an_owner_directory_planted_as_a_link_makes_uploads_fail_cleanly(real_bridge: Service, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    owner = tmp_path / "staging" / caller_id(Secret(TOKEN))
    owner.symlink_to(elsewhere)
    started = call(real_bridge, "kb_upload_start", {"filename": "a.txt", "total_size": 3})
    assert started["isError"] and started["structuredContent"]["error"]["code"] == "STORAGE_ERROR"
    assert list(elsewhere.iterdir()) == []  # nothing created outside the staging directory


# --- a finish whose local write fails ---------------------------------------------------------------------


def test_a_finish_whose_local_write_fails_returns_the_engine_job_and_never_makes_two(
    engine: Service, real_bridge: Service, tmp_path: Path
) -> None:
    data = b"a file whose finish cannot be written down locally\n"
    upload_id = call(real_bridge, "kb_upload_start", {"filename": "immutable.txt", "total_size": len(data),
                                                       "source_path": "hardening/immutable.txt"})["structuredContent"]["upload_id"]
    call(real_bridge, "kb_upload_chunk", {"upload_id": upload_id, "chunk_index": 0, "data": base64.b64encode(data).decode()})
    staged = tmp_path / "staging" / caller_id(Secret(TOKEN)) / upload_id
    # An immutable directory: nothing can be created in it, root included, so marking the upload finished fails.
    if subprocess.run(["chattr", "+i", str(staged)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported here")
    try:
        first = call(real_bridge, "kb_upload_finish", {"upload_id": upload_id})
    finally:
        subprocess.run(["chattr", "-i", str(staged)], check=True)
    second = call(real_bridge, "kb_upload_finish", {"upload_id": upload_id})
    assert not first.get("isError"), first
    assert second["structuredContent"]["job_id"] == first["structuredContent"]["job_id"]
    wait_until(lambda: "hardening/immutable.txt" in engine_sources(engine), 60, what="the document")
    assert engine_sources(engine).count("hardening/immutable.txt") == 1


# --- the per-call deadline ----------------------------------------------------------------------------------


def test_a_dripping_engine_gets_engine_timeout_within_10_seconds(tmp_path: Path) -> None:
    with StandInEngine(drip=1.0) as engine:
        bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN, "KB_ENGINE_TIMEOUT": "5"}, workers=1)
        try:
            started = time.monotonic()
            reply = modern_call(bridge.url, TOKEN, "kb_search", {"query": "slow"}, timeout=60)
            elapsed = time.monotonic() - started
        finally:
            bridge.stop()
    assert error_code(reply) in ("ENGINE_TIMEOUT", "ENGINE_UNAVAILABLE") and elapsed < 10, (reply, elapsed)


# --- secrets in engine error bodies --------------------------------------------------------------------------


ENGINE_SECRET = "EngineKey-7f3a9c21-Quartz-Falcon-5521"


def crafted_bodies(secret: str) -> list[tuple[int, Any]]:
    """Engine error bodies that quote the secret: whole, in every letter case, cut by the 300-character
    message limit, in pieces, in both error shapes."""
    variants = [secret, secret.upper(), secret.lower(), secret.swapcase(), secret.title()]
    pieces = [secret[i : i + n] for n in (8, 9, 12, 20) for i in (0, 3, len(secret) - n)]
    messages = [f"bad input near {v}" for v in variants]
    messages += ["x" * offset + v for v in variants[:2] for offset in (250, 280, 290, 295, 299, 300, 1000)]
    messages += [f"fragment {p} here" for p in pieces] + [f"{p.upper()}" for p in pieces]
    messages += [f"{secret}{secret.lower()}", f"key={secret}&next=1", f"'{secret}'", f"<{secret}>"]
    bodies: list[tuple[int, Any]] = []
    for index, message in enumerate(messages):
        status = (400, 409, 422)[index % 3]
        shape = index % 3
        if shape == 0:
            bodies.append((status, {"error": {"code": "bad_request", "message": message}}))
        elif shape == 1:
            bodies.append((status, {"detail": message}))
        else:
            bodies.append((status, {"detail": [{"loc": ["body", "query"], "msg": message}]}))
    return bodies


def leaks(text: str, secret: str) -> list[str]:
    low = text.lower()
    return [secret[i : i + 8] for i in range(len(secret) - 7) if secret[i : i + 8].lower() in low]


def test_no_piece_of_a_secret_reaches_a_tool_result_or_a_log(tmp_path: Path) -> None:
    bodies = crafted_bodies(ENGINE_SECRET) + crafted_bodies(TOKEN)
    with StandInEngine() as engine:
        queue = list(bodies)
        engine.custom = lambda method, path: queue.pop(0) if path.startswith("/api/v1/search") and queue else None
        bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_SECRET, "KB_MCP_API_KEY": TOKEN}, workers=1)
        try:
            replies = [modern_call(bridge.url, TOKEN, "kb_search", {"query": f"probe {i}"}) for i in range(len(bodies))]
        finally:
            bridge.stop()
        log = bridge.log_path.read_text()
    assert len(bodies) >= 80 and all(error_code(r) == "VALIDATION_ERROR" or error_code(r) == "CONFLICT" for r in replies)
    for reply in replies:
        text = str(reply)
        assert leaks(text, ENGINE_SECRET) == [] and leaks(text, TOKEN) == [], text[:500]
    assert leaks(log, ENGINE_SECRET) == [] and leaks(log, TOKEN) == []
    assert hashlib.sha256(log.encode()).hexdigest()  # (the log was read whole)
