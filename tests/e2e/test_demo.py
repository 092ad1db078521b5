"""`kb-bridge demo`, the README's run command: one command, then an agent adds notes, uploads a
PDF and finds things by meaning; Ctrl-C stops both processes."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from kb_bridge.testing.mcp_client import connect
from kb_bridge.testing.processes import REPO, child_pids, clean_env, free_port, http_ok, wait_until
from kb_bridge.testing.console import ConsoleClient
from kb_bridge.testing.files import minimal_pdf

pytestmark = pytest.mark.anyio


async def test_demo_runs_the_whole_system_and_stops_cleanly(tmp_path: Path) -> None:
    port, engine_port = free_port(), free_port()
    out = tmp_path / "demo.out"
    with open(out, "w") as sink:
        demo = subprocess.Popen(
            [sys.executable, "-m", "kb_bridge", "demo", "--data", str(tmp_path / "data"), "--port", str(port), "--engine-port", str(engine_port)],
            stdout=sink, stderr=subprocess.STDOUT, env=clean_env({}), cwd=REPO,
        )
    try:
        wait_until(lambda: "Press Ctrl-C" in out.read_text() or demo.poll() is not None, 300, interval=0.2, what="the demo")
        text = out.read_text()
        assert demo.poll() is None, text
        url = re.search(r"MCP URL:\s+(\S+)", text).group(1)  # type: ignore[union-attr]
        token = re.search(r"Token:\s+(\S+)", text).group(1)  # type: ignore[union-attr]
        assert f"claude mcp add --transport http kb {url}" in text and '"mcpServers"' in text
        base = url.removesuffix("/mcp")
        check_the_printed_console_command_line_and_paths(text, base, token)
        async with connect(base, token) as client:
            runbook = await client.call_tool("kb_search", {"query": "how do I undo a bad deployment", "collection": "documents", "top": 3})
            assert runbook.structured_content["results"][0]["title"] == "release-runbook.md"
            memory = await client.call_tool("kb_search", {"query": "what style of answers does the user like", "collection": "memory", "top": 1})
            assert "bullet points" in memory.structured_content["results"][0]["text"]
            note = await client.call_tool("kb_addnote", {"text": "The staging database is refreshed every Sunday night.",
                                                         "collection": "memory", "wait": True})
            assert note.structured_content["status"] == "done"
            pdf = minimal_pdf(["Parental leave", "Employees get sixteen weeks of paid parental leave."])
            started = await client.call_tool("kb_upload_start", {"filename": "leave.pdf", "total_size": len(pdf)})
            upload_id = started.structured_content["upload_id"]
            await client.call_tool("kb_upload_chunk", {"upload_id": upload_id, "chunk_index": 0, "data": base64.b64encode(pdf).decode()})
            finished = await client.call_tool("kb_upload_finish", {"upload_id": upload_id})
            job_id = finished.structured_content["job_id"]
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                jobs = (await client.call_tool("kb_jobs", {"limit": 50})).structured_content["jobs"]
                if next(j for j in jobs if j["id"] == job_id)["status"] == "done":
                    break
                time.sleep(0.2)
            found = await client.call_tool("kb_search", {"query": "how many weeks off do new parents get", "top": 1})
            assert found.structured_content["results"][0]["title"] == "leave.pdf"
        demo.send_signal(signal.SIGINT)
        assert demo.wait(60) == 0
        assert "stopped." in out.read_text()
        assert not http_ok(base + "/healthz") and not http_ok(f"http://127.0.0.1:{engine_port}/healthz")
    finally:
        if demo.poll() is None:
            # The engine and the bridge run in sessions of their own: stop them through the demo
            # (SIGINT), and only if that fails kill them directly.
            children = child_pids(demo.pid)
            demo.send_signal(signal.SIGINT)
            try:
                demo.wait(60)
            except subprocess.TimeoutExpired:
                for pid in children:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
                demo.kill()
                demo.wait(10)


def check_the_printed_console_command_line_and_paths(text: str, base: str, token: str) -> None:
    """Everything else the demo prints works: the console URL signs in with the printed token, `GET /` leads a
    browser there, the `export` line runs the command line against the demo's engine, the logs path exists."""
    console = re.search(r"Console:\s+(\S+)", text).group(1)  # type: ignore[union-attr]
    assert console == base + "/ui/"
    page = ConsoleClient(console, token).get("/search", params={"q": "undo a bad deployment"}).text
    assert "release-runbook.md" in page and '<span class="who">API key</span>' in page  # not the key's digest
    browser = requests.get(base + "/", headers={"Accept": "text/html,*/*;q=0.8"}, allow_redirects=False, timeout=10)
    assert browser.status_code == 302 and browser.headers["Location"].endswith("/ui/")
    assert requests.get(base + "/", timeout=10).json()["mcp"] == "/mcp"  # a JSON client keeps a JSON answer
    exported = dict(re.findall(r"(KB_ENGINE_URL|KB_API_KEY)=(\S+)", re.search(r"export (.+)", text).group(1)))  # type: ignore[union-attr]
    found = subprocess.run([sys.executable, "-m", "kb_bridge", "search", "undo a bad deployment", "--json"],
                           env=clean_env(exported), capture_output=True, text=True, timeout=120, cwd=REPO)
    assert found.returncode == 0, found.stderr
    assert "release-runbook.md" in found.stdout
    logs = Path(re.search(r"Logs: (\S+?)\. Press", text).group(1))  # type: ignore[union-attr]
    assert (logs / "bridge.log").is_file() and (logs / "engine.log").is_file()


# --- stopping and restarting: signals at any moment, the same ports at once, one demo per directory ----------


def start_demo(tmp_path: Path, data: Path, port: int, engine_port: int, name: str = "demo") -> tuple[subprocess.Popen[bytes], Path]:
    out = tmp_path / f"{name}.out"
    with open(out, "w") as sink:
        demo = subprocess.Popen(
            [sys.executable, "-m", "kb_bridge", "demo", "--data", str(data), "--port", str(port),
             "--engine-port", str(engine_port), "--no-sample"],
            stdout=sink, stderr=subprocess.STDOUT, env=clean_env({}), cwd=REPO,
        )
    return demo, out


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, their children, ...)."""
    found: list[int] = []
    pending = [pid]
    while pending:
        try:
            children = child_pids(pending.pop())
        except FileNotFoundError:
            continue
        found += children
        pending += children
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def wait_ready(demo: subprocess.Popen[bytes], out: Path) -> None:
    wait_until(lambda: "Press Ctrl-C" in out.read_text() or demo.poll() is not None, 300, interval=0.2, what="the demo")
    assert demo.poll() is None, out.read_text()


def stop_for_good(demo: subprocess.Popen[bytes], tracked: list[int]) -> None:
    """Test cleanup: a demo (and anything it started) that a failed test left running is killed."""
    if demo.poll() is None:
        demo.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            demo.wait(60)
    for pid in tracked:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if demo.poll() is None:
        demo.kill()
        demo.wait(10)


def test_demo_restarts_at_once_on_the_same_ports(tmp_path: Path) -> None:
    port, engine_port = free_port(), free_port()
    demo, out = start_demo(tmp_path, tmp_path / "data", port, engine_port)
    tracked: list[int] = []
    try:
        wait_ready(demo, out)
        tracked = descendants(demo.pid)
        for _ in range(20):  # connections the server closes leave the port's sockets in TIME_WAIT
            assert http_ok(f"http://127.0.0.1:{port}/healthz")
        demo.send_signal(signal.SIGINT)
        assert demo.wait(60) == 0
        again, again_out = start_demo(tmp_path, tmp_path / "data", port, engine_port, name="again")
        try:
            wait_ready(again, again_out)
            assert "in use" not in again_out.read_text()
        finally:
            stop_for_good(again, descendants(again.pid))
    finally:
        stop_for_good(demo, tracked)


def test_sighup_stops_the_demo_and_everything_it_started(tmp_path: Path) -> None:
    demo, out = start_demo(tmp_path, tmp_path / "data", free_port(), free_port())
    tracked: list[int] = []
    try:
        wait_ready(demo, out)
        tracked = descendants(demo.pid)
        assert len(tracked) >= 3  # the engine, the bridge's gunicorn master and its workers
        demo.send_signal(signal.SIGHUP)
        assert demo.wait(60) == 0
        wait_until(lambda: not any(alive(pid) for pid in tracked), 30, what="every process to stop")
        assert "stopped." in out.read_text()
    finally:
        stop_for_good(demo, tracked)


def test_ctrl_c_while_the_engine_starts_leaves_nothing_running(tmp_path: Path) -> None:
    demo, out = start_demo(tmp_path, tmp_path / "data", free_port(), free_port())
    tracked: list[int] = []
    try:
        wait_until(lambda: bool(child_pids(demo.pid)) or demo.poll() is not None, 60, interval=0.01, what="the engine to start")
        tracked = descendants(demo.pid)
        assert "kb-bridge is ready" not in out.read_text()  # still starting
        demo.send_signal(signal.SIGINT)
        assert demo.wait(60) == 0, out.read_text()
        tracked += [pid for pid in descendants(demo.pid) if pid not in tracked]
        wait_until(lambda: not any(alive(pid) for pid in tracked), 30, what="every process to stop")
        assert "Traceback" not in out.read_text() and "KeyboardInterrupt" not in out.read_text()
    finally:
        stop_for_good(demo, tracked)


def test_a_second_demo_on_the_same_data_directory_refuses(tmp_path: Path) -> None:
    demo, out = start_demo(tmp_path, tmp_path / "data", free_port(), free_port())
    tracked: list[int] = []
    try:
        wait_ready(demo, out)
        tracked = descendants(demo.pid)
        second = subprocess.run(
            [sys.executable, "-m", "kb_bridge", "demo", "--data", str(tmp_path / "data"), "--port", str(free_port()),
             "--engine-port", str(free_port()), "--no-sample"],
            capture_output=True, text=True, env=clean_env({}), cwd=REPO, timeout=60,
        )
        assert second.returncode == 2
        assert f"another demo (pid {demo.pid}) is running on {tmp_path / 'data'}" in second.stdout
        assert demo.poll() is None and http_ok(re.search(r"MCP URL:\s+(\S+)", out.read_text()).group(1).removesuffix("/mcp") + "/healthz")  # type: ignore[union-attr]
    finally:
        stop_for_good(demo, tracked)


def test_a_port_out_of_range_is_a_usage_error_naming_the_option() -> None:
    # --port 70000 reached socket.bind: an OverflowError traceback
    for option, value in (("--port", "70000"), ("--engine-port", "-5"), ("--port", "0"), ("--engine-port", "80a")):
        result = subprocess.run([sys.executable, "-m", "kb_bridge", "demo", option, value], capture_output=True,
                                text=True, cwd=REPO, env=clean_env({}), timeout=60)
        assert result.returncode == 2, result
        assert result.stderr.splitlines()[-1] == f"kb-bridge demo: error: argument {option}: '{value}' is not a port (1-65535)"
        assert "Traceback" not in result.stderr
