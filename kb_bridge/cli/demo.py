"""`kb-bridge demo`: the local engine and the bridge together on loopback, in one command.

It keeps its state in one data directory (engine database, upload staging, logs, and the
generated keys, so client configurations stay valid from one run to the next), loads a small
sample corpus the first time, prints the MCP URL and copy-paste client configurations, and
stops both processes cleanly on Ctrl-C, SIGTERM or SIGHUP (a closed terminal), at any moment, even
while they start. One demo per data directory: a second one refuses with a message naming the first.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import functools
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path
from typing import IO

import requests

from kb_bridge.client.engine import EngineClient
from kb_bridge.errors import KbError
from kb_bridge.credentials.secret import Secret
from kb_bridge.settings import EngineSettings
from kb_bridge.uploads.multipart import file_job_body

SAMPLE_MARKER = ".sample-loaded"
LOCK_NAME = "demo.lock"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1


class Stop(BaseException):
    """Ctrl-C, SIGTERM or SIGHUP arrived: stop everything (a BaseException, like KeyboardInterrupt)."""


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "kb-bridge" / "demo"


def say(message: str) -> None:
    print(message, flush=True)


def _secret_file(path: Path) -> str:
    """A key kept in the data directory (mode 0600), made the first time."""
    if path.exists():
        return path.read_text().strip()
    value = secrets.token_urlsafe(32)
    path.write_text(value + "\n")
    path.chmod(0o600)
    return value


def _port_free(port: int) -> bool:
    """Whether a server could listen on the port now. SO_REUSEADDR as servers set it (gunicorn does):
    connections of a demo just stopped, waiting in TIME_WAIT, do not make the port "in use"."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _lock(data: Path) -> IO[str] | None:
    """Hold the data directory's demo lock (released by the kernel when this process ends, however it
    ends); None when another demo holds it."""
    data.mkdir(parents=True, exist_ok=True)
    handle = open(data / LOCK_NAME, "a+", encoding="utf-8")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def _holder(data: Path) -> str:
    try:
        return (data / LOCK_NAME).read_text().strip() or "unknown"
    except OSError:
        return "unknown"


def _prepare_child() -> None:
    """In the child before exec: take the stop signals again (the demo blocks them while it spawns, and
    a blocked mask survives exec), and get SIGTERM if the demo dies (even by SIGKILL), so nothing
    outlives it."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the demo's own handlers still stop its children
        pass


def _wait_http(url: str, process: subprocess.Popen[bytes], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited while starting")
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not answer at {url} within {timeout:.0f}s")


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.data = Path(args.data) if args.data else default_data_dir()
        self.port = args.port
        self.engine_port = args.engine_port
        self.load_sample = not args.no_sample
        self.processes: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._stopping = False

    def run(self) -> int:
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_signal)
        lock = None
        try:
            lock = _lock(self.data)
            if lock is None:
                say(f"kb-bridge demo: another demo (pid {_holder(self.data)}) is running on {self.data}; stop it "
                    "first (Ctrl-C in its terminal), or give this one another --data directory")
                return 2
            for port in (self.engine_port, self.port):
                if not _port_free(port):
                    say(f"kb-bridge demo: port {port} on 127.0.0.1 is in use; choose another with --port / --engine-port")
                    return 2
            return self._run()
        except Stop:
            self._stopping = True
            say("stopping …")
            return 0
        finally:
            self.stop()
            if lock is not None:
                lock.close()

    def _on_signal(self, signum: int, frame: object) -> None:
        if not self._stopping:
            raise Stop()

    def _run(self) -> int:
        (self.data / "logs").mkdir(parents=True, exist_ok=True)
        self.data.chmod(0o700)
        engine_key = _secret_file(self.data / "engine-key")
        token = _secret_file(self.data / "mcp-token")
        engine_url = f"http://127.0.0.1:{self.engine_port}"
        say(f"kb-bridge demo: data in {self.data}")
        try:
            self._start_engine(engine_key)
            engine = EngineClient(EngineSettings(url=engine_url, api_key=Secret(engine_key)))
            self._wait_for_model(engine)
            if self.load_sample and not (self.data / SAMPLE_MARKER).exists():
                self._load_sample(engine)
            self._start_bridge(engine_url, engine_key, token)
        except (RuntimeError, KbError) as exc:
            say(f"kb-bridge demo: {exc}; logs are in {self.data / 'logs'}")
            return 1
        self._print_connection_help(token)
        return self._wait()

    # --- processes ---------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = open(self.data / "logs" / f"{name}.log", "ab")
        # A stop signal waits until the child is recorded, so that stop() always knows what to stop.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                       preexec_fn=_prepare_child)
            self.processes.append((name, process))
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        return process

    def _base_env(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if not k.startswith("KB_")}

    def _start_engine(self, engine_key: str) -> None:
        say(f"starting the local engine on 127.0.0.1:{self.engine_port} …")
        argv = [sys.executable, "-m", "kb_bridge.local_engine", "--data", str(self.data / "engine"),
                "--bind", f"127.0.0.1:{self.engine_port}"]
        process = self._spawn("engine", argv, {**self._base_env(), "KB_API_KEY": engine_key})
        _wait_http(f"http://127.0.0.1:{self.engine_port}/healthz", process, 120, "the local engine")

    def _wait_for_model(self, engine: EngineClient, timeout: float = 180) -> None:
        """Semantic search needs the embedding model; wait for it (full-text works meanwhile)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = engine.status()
            if status.get("model") or "vector" not in (status.get("search_modes") or ["vector"]):
                return
            time.sleep(0.5)
        say("the embedding model is still loading; search runs full-text until it is ready")

    def _start_bridge(self, engine_url: str, engine_key: str, token: str) -> None:
        say(f"starting kb-bridge on 127.0.0.1:{self.port} …")
        env = {
            **self._base_env(),
            "KB_BIND": f"127.0.0.1:{self.port}",
            "KB_WORKERS": "2",
            "KB_ENGINE_URL": engine_url,
            "KB_API_KEY": engine_key,
            "KB_MCP_API_KEY": token,
            "KB_UPLOAD_DIR": str(self.data / "uploads"),
        }
        argv = [sys.executable, "-m", "kb_bridge", "serve"]
        process = self._spawn("bridge", argv, env)
        _wait_http(f"http://127.0.0.1:{self.port}/readyz", process, 60, "kb-bridge")

    # --- the sample corpus -----------------------------------------------------------------------

    def _load_sample(self, engine: EngineClient) -> None:
        corpus = resources.files("kb_bridge") / "demo_corpus"
        jobs = []
        for entry in sorted((corpus / "documents").iterdir(), key=lambda e: e.name):
            data = entry.read_bytes()
            fields = [("title", entry.name), ("source_path", f"sample/{entry.name}"), ("tags", "collection:documents"), ("tags", "sample")]
            upload = file_job_body(entry.name, len(data), functools.partial(list, [data]), fields)
            job = engine.upload_file_job(upload, f"demo-{entry.name}")
            jobs.append(job["id"])
        for entry in sorted((corpus / "memory").iterdir(), key=lambda e: e.name):
            note = {"text": entry.read_text().strip(), "title": entry.name.removesuffix(".md"),
                    "source_path": f"memory/{entry.name}", "tags": ["collection:memory", "sample"]}
            jobs.append(engine.create_note_job(note, idempotency_key=f"demo-{entry.name}")["id"])
        say(f"loading the sample corpus ({len(jobs)} documents and notes) …")
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            states = [engine.get_job(job_id)["status"] for job_id in jobs]
            if all(state in ("done", "failed") for state in states):
                failed = states.count("failed")
                if failed:
                    say(f"{failed} sample document(s) failed to index; see kb_jobs")
                (self.data / SAMPLE_MARKER).touch()
                return
            time.sleep(0.3)
        raise RuntimeError("the sample corpus did not finish indexing in time")

    # --- output and shutdown ---------------------------------------------------------------------------

    def _print_connection_help(self, token: str) -> None:
        url = f"http://127.0.0.1:{self.port}/mcp"
        engine_key = (self.data / "engine-key").read_text().strip()
        # The absolute path: Claude Desktop does not see this virtual environment's PATH.
        command = Path(sys.executable).parent / "kb-bridge"
        desktop = {
            "mcpServers": {
                "kb": {
                    "command": str(command) if command.exists() else "kb-bridge",
                    "args": ["stdio"],
                    "env": {"KB_ENGINE_URL": f"http://127.0.0.1:{self.engine_port}", "KB_API_KEY": engine_key},
                }
            }
        }
        say("")
        say("kb-bridge is ready.")
        say(f"  MCP URL:   {url}")
        say(f"  Token:     {token}")
        say(f"  Console:   http://127.0.0.1:{self.port}/ui/  (sign in with the token above)")
        say("")
        say("Command line (kb-bridge search, add, get, ingest, export, ...), in another shell:")
        say(f"  export KB_ENGINE_URL=http://127.0.0.1:{self.engine_port} KB_API_KEY={engine_key}")
        say("")
        say("Claude Code:")
        say(f'  claude mcp add --transport http kb {url} --header "Authorization: Bearer {token}"')
        say("")
        say("Claude Desktop (claude_desktop_config.json, stdio):")
        say("  " + json.dumps(desktop, indent=2).replace("\n", "\n  "))
        say("")
        say(f"Logs: {self.data / 'logs'}. Press Ctrl-C to stop.")

    def _wait(self) -> int:
        """Until a stop signal (which raises Stop) or a process that dies on its own."""
        while True:
            for name, process in self.processes:
                if process.poll() is not None:
                    say(f"kb-bridge demo: the {name} stopped unexpectedly (exit {process.returncode}); see {self.data / 'logs' / (name + '.log')}")
                    return 1
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop every process started, the bridge first (it drains in-flight calls), then the engine.
        Further signals are ignored meanwhile: a second Ctrl-C must not leave a process behind."""
        self._stopping = True
        for _name, process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(40)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
        if self.processes:
            say("stopped.")
        self.processes = []


def run_demo(args: argparse.Namespace) -> int:
    return Demo(args).run()
