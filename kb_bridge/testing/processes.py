"""Real processes for end-to-end tests and benchmarks: free loopback ports, start, wait until ready, stop.

Everything binds 127.0.0.1, waits by polling with a deadline (never a bare sleep), and is
stopped by the test that started it, with its log shown if it failed to come up.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
import requests

# The engine key of the end-to-end suite's shared engine (tests/e2e/conftest.py).
ENGINE_KEY = "engine-key-e2e-0123456789abcdef"

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def http_ok(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.RequestException:
        return False


def connections_of(pid: int, port: int) -> int:
    """Established TCP connections to `port` that process `pid` holds (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].split(":")[1], 16)
        if local_port == port and fields[3] == "01" and fields[9] in inodes:
            count += 1
    return count


def child_pids(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def worker_pids(service: Service) -> list[int]:
    """The worker processes of a gunicorn (or uvicorn) master."""
    return child_pids(service.process.pid)


def tool_event_pids(service: Service, tool: str) -> set[int]:
    """The processes that logged a successful call of `tool` (from the JSON log)."""
    import json

    pids = set()
    for line in service.log_path.read_text().splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry.get("event") == "mcp_tool_success" and entry.get("tool") == tool:
                pids.add(entry["pid"])
    return pids


def clean_env(overrides: Mapping[str, str]) -> dict[str, str]:
    """The test process's environment without any KB_* setting, plus `overrides`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
    env.update(overrides)
    return env


class Service:
    """A started server process with its log file."""

    def __init__(self, name: str, argv: list[str], env: Mapping[str, str], log_path: Path, url: str,
                 cwd: Path = REPO) -> None:
        self.name = name
        self.url = url
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.process = subprocess.Popen(
            argv, env=dict(env), cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self, path: str = "/healthz", timeout: float = 60.0) -> Service:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.log()}")
            return http_ok(self.url + path)

        try:
            wait_until(ready, timeout, what=f"{self.name} at {self.url}{path}")
        except TimeoutError:
            self.stop()
            raise TimeoutError(f"{self.name} did not become ready:\n{self.log()}") from None
        return self

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")[-8000:]

    def signal(self, sig: int) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.process.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        self._log.close()
        return self.process.returncode


def start_bridge(
    tmp: Path, env: Mapping[str, str], workers: int = 2, port: int | None = None,
    app: str = "kb_bridge.asgi:app", pythonpath: str | None = None,
) -> Service:
    """kb-bridge exactly as documented: gunicorn -c gunicorn.conf.py kb_bridge.asgi:app (benchmarks
    may serve another app built by create_app, from `pythonpath`)."""
    port = port or free_port()
    full_env = clean_env({"KB_BIND": f"127.0.0.1:{port}", "KB_WORKERS": str(workers), **env})
    full_env.setdefault("KB_UPLOAD_DIR", str(tmp / "uploads"))
    argv = [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", *(["--pythonpath", pythonpath] if pythonpath else []), app]
    log = tmp / f"bridge-{port}.log"
    return Service("kb-bridge", argv, full_env, log, f"http://127.0.0.1:{port}").wait_ready()


def start_engine(tmp: Path, data: Path, env: Mapping[str, str] | None = None, port: int | None = None, *,
                 name: str = "local engine", cwd: Path = REPO, timeout: float = 120) -> Service:
    """The bundled local engine, as `kb-bridge engine` runs it, its log in `tmp`.

    `cwd` is where it runs: `python -m` imports kb_bridge from there first, so a run of another checkout (by
    PYTHONPATH in `env`) must start elsewhere. `timeout` bounds the wait for it to answer.
    """
    port = port or free_port()
    full_env = clean_env(dict(env or {}))
    argv = [sys.executable, "-m", "kb_bridge", "engine", "--data", str(data), "--bind", f"127.0.0.1:{port}"]
    log = tmp / f"engine-{port}.log"
    return Service(name, argv, full_env, log, f"http://127.0.0.1:{port}", cwd=cwd).wait_ready(timeout=timeout)


def require(tool: str) -> str:
    """A program the tests need; skipped locally when missing, a failure in CI (KB_TEST_REQUIRE_ALL=1)."""
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("KB_TEST_REQUIRE_ALL") == "1":
            pytest.fail(f"{tool} is required (install it; .ci/run does)")
        pytest.skip(f"{tool} is not installed")
    return path
