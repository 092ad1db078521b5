"""Operations under gunicorn: metrics across workers, graceful SIGTERM, `kb-bridge check`."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from kb_bridge.testing.processes import ENGINE_KEY
from kb_bridge.testing.mcp_client import connect
from kb_bridge.testing.mcp_http import modern_call
from kb_bridge.testing.processes import REPO, Service, clean_env, free_port, start_bridge, tool_event_pids, wait_until
from kb_bridge.testing.standin import StandInEngine

TOKEN = "agent-token-ops-0123456789abcdef"
METRICS_TOKEN = "metrics-token-0123456789abcdef"


def tool_calls(metrics_text: str, tool: str, outcome: str) -> float:
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("kb_bridge_tool_calls_total{") and f'tool="{tool}"' in line and f'outcome="{outcome}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.anyio
async def test_metrics_count_calls_correctly_across_two_workers(tmp_path: Path) -> None:
    with StandInEngine() as engine:
        env = {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN, "KB_METRICS_TOKEN": METRICS_TOKEN}
        bridge = start_bridge(tmp_path, env, workers=2)
        try:
            calls = 0
            deadline = time.monotonic() + 60
            while (calls < 12 or len(tool_event_pids(bridge, "kb_status")) < 2) and time.monotonic() < deadline:
                async with connect(bridge.url, TOKEN) as client:  # a fresh connection each time
                    assert not (await client.call_tool("kb_status", {})).is_error
                calls += 1
            assert len(tool_event_pids(bridge, "kb_status")) == 2
            async with connect(bridge.url, TOKEN) as client:
                assert (await client.call_tool("kb_search", {"query": "x", "top": 0})).is_error
            refused = requests.get(bridge.url + "/metrics", timeout=5)
            scraped = requests.get(bridge.url + "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=5)
        finally:
            bridge.stop()
    assert refused.status_code == 401
    assert scraped.status_code == 200
    text = scraped.text
    assert tool_calls(text, "kb_status", "ok") == calls
    assert tool_calls(text, "kb_search", "VALIDATION_ERROR") == 1
    assert "kb_bridge_tool_duration_seconds_bucket" in text
    assert 'kb_bridge_engine_request_duration_seconds_count{endpoint="GET /status",outcome="200"}' in text
    assert "kb_bridge_uploads_in_progress" in text and 'kb_bridge_auth_failures_total{reason="metrics_token"} 1.0' in text


def test_metrics_are_scraped_while_the_redis_upload_store_is_unreachable(tmp_path: Path) -> None:
    """/metrics reads the upload gauges from the shared store at scrape time. With Redis unreachable that read
    failed the whole scrape (500, an HTML page), so every other metric (tool calls, engine errors) was lost exactly
    while something was wrong; now the upload gauges are left out and the rest is served."""
    with StandInEngine() as engine:
        env = {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN, "KB_METRICS_TOKEN": METRICS_TOKEN,
               "KB_UPLOAD_STORE": f"redis://127.0.0.1:{free_port()}/0"}  # nothing listens there
        bridge = start_bridge(tmp_path, env, workers=1)
        try:
            assert "result" in modern_call(bridge.url, TOKEN, "kb_status", {})
            scraped = requests.get(bridge.url + "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=30)
        finally:
            bridge.stop()
    assert scraped.status_code == 200, scraped.text[:300]
    assert tool_calls(scraped.text, "kb_status", "ok") == 1
    assert "kb_bridge_uploads_in_progress" not in scraped.text


def test_metrics_start_from_nothing_whatever_prometheus_multiproc_dir_the_environment_names(tmp_path: Path) -> None:
    """A PROMETHEUS_MULTIPROC_DIR inherited from the environment (prometheus_client's documented variable) was used
    as it was and never emptied: every restart added the earlier runs' counts, as it would files anyone who can
    write there put there. Each server now makes its own directory (0700)."""
    inherited = tmp_path / "metrics"
    inherited.mkdir()
    with StandInEngine() as engine:
        env = {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN, "KB_METRICS_TOKEN": METRICS_TOKEN,
               "PROMETHEUS_MULTIPROC_DIR": str(inherited)}
        scraped = []
        for _run in range(2):
            bridge = start_bridge(tmp_path, env, workers=1)
            try:
                assert "result" in modern_call(bridge.url, TOKEN, "kb_status", {})
                scraped.append(requests.get(bridge.url + "/metrics", timeout=30,
                                            headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).text)
            finally:
                assert bridge.stop() == 0
    assert [tool_calls(text, "kb_status", "ok") for text in scraped] == [1, 1]  # the second run's own call only
    assert list(inherited.iterdir()) == []



def test_a_server_starting_removes_the_metrics_directory_of_one_killed_outright(tmp_path: Path) -> None:
    """A master killed with SIGKILL (the OOM killer, a container's hard stop) cannot remove its multiprocess
    directory, and every such death left one in the temporary directory for good. The next server sweeps the
    directories of masters that no longer run (serving/metrics_dir.py), and removes its own when it exits."""
    import os

    temporary = tmp_path / "tmp"
    temporary.mkdir()

    def metrics_dirs() -> set[Path]:
        return set(temporary.glob("kb-bridge-metrics-*"))

    with StandInEngine() as engine:
        env = {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN, "KB_METRICS_TOKEN": METRICS_TOKEN,
               "TMPDIR": str(temporary)}
        killed = start_bridge(tmp_path, env, workers=1)
        try:
            assert "result" in modern_call(killed.url, TOKEN, "kb_status", {})
            left = metrics_dirs()
            assert len(left) == 1 and any(next(iter(left)).iterdir())  # the call's counts are in it
        finally:
            os.killpg(killed.process.pid, signal.SIGKILL)
            killed.stop()
        assert metrics_dirs() == left  # nothing could remove it

        bridge = start_bridge(tmp_path, env, workers=1)
        try:
            own = metrics_dirs()
            assert len(own) == 1 and not own & left
            assert "result" in modern_call(bridge.url, TOKEN, "kb_status", {})
            scraped = requests.get(bridge.url + "/metrics", timeout=30,
                                   headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).text
        finally:
            assert bridge.stop() == 0
    assert tool_calls(scraped, "kb_status", "ok") == 1
    assert metrics_dirs() == set()

def test_sigterm_lets_an_in_flight_call_finish_and_refuses_new_ones(tmp_path: Path) -> None:
    import concurrent.futures

    with StandInEngine(delay=3.0) as engine:
        env = {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN, "KB_GRACEFUL_TIMEOUT": "20"}
        bridge = start_bridge(tmp_path, env, workers=1)
        try:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                pending = pool.submit(modern_call, bridge.url, TOKEN, "kb_search", {"query": "slow"})
                wait_until(lambda: engine.in_flight == 1, 30, what="the call to reach the engine")
                bridge.signal(signal.SIGTERM)

                def refused() -> bool:
                    try:
                        requests.get(bridge.url + "/healthz", timeout=1)
                    except requests.ConnectionError:
                        return True
                    return False

                wait_until(refused, 10, what="new connections to be refused")
                reply = pending.result(timeout=30)
            exit_code = bridge.process.wait(30)
        finally:
            bridge.stop()
    assert "result" in reply and not reply["result"].get("isError"), reply  # type: ignore[union-attr]
    assert exit_code == 0


def test_a_sighup_that_finds_the_configuration_broken_stops_every_worker_and_says_why(tmp_path: Path) -> None:
    """gunicorn executes gunicorn.conf.py again at a SIGHUP. A configuration that no longer loads (here a tokens
    file edited into something unreadable) raised SystemExit there, which ends gunicorn's master alone: its
    workers ran on, the old configuration, unsupervised, holding the port (a restart failed on it) and deaf to
    the master's SIGTERM. Now the master stops them as at any shutdown and exits non-zero naming the setting."""
    import hashlib
    import os

    from kb_bridge.testing.processes import worker_pids

    token = "named-reader-" + "r" * 32
    tokens_file = tmp_path / "tokens.toml"
    tokens_file.write_text(f'[[token]]\nname = "reader"\nsha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
                           'scopes = ["kb:read"]\n')
    tokens_file.chmod(0o600)
    with StandInEngine() as engine:
        bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": engine.url, "KB_MCP_TOKENS_FILE": str(tokens_file)}, workers=2)
        workers = worker_pids(bridge)
        assert len(workers) == 2

        def alive(pid: int) -> bool:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return False
            return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"

        try:
            tokens_file.write_text("[[token]\nthis is not TOML")
            bridge.signal(signal.SIGHUP)
            exit_code = bridge.process.wait(60)
            wait_until(lambda: not any(alive(pid) for pid in workers), 30, what="the workers to stop with their master")
        finally:
            bridge.stop()
            for pid in workers:  # an orphan the bridge left (before the fix), ended by its id
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
    assert exit_code != 0
    assert "KB_MCP_TOKENS_FILE" in bridge.log()


def run_check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kb_bridge", "check"], env=clean_env(env), capture_output=True,
                          text=True, timeout=60, cwd=REPO)


def test_check_passes_against_a_good_engine(engine: Service, tmp_path: Path) -> None:
    done = run_check({"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_UPLOAD_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stdout
    assert "all checks passed" in done.stdout and "version 3." in done.stdout


def test_check_fails_on_a_down_engine(tmp_path: Path) -> None:
    done = run_check({"KB_ENGINE_URL": f"http://127.0.0.1:{free_port()}", "KB_UPLOAD_DIR": str(tmp_path)})
    assert done.returncode == 1 and "ENGINE_UNAVAILABLE" in done.stdout


def test_check_fails_on_a_wrong_key(engine: Service, tmp_path: Path) -> None:
    done = run_check({"KB_ENGINE_URL": engine.url, "KB_API_KEY": "wrong-key-0000000000", "KB_UPLOAD_DIR": str(tmp_path)})
    assert done.returncode == 1 and "ENGINE_AUTH_ERROR" in done.stdout
    assert "wrong-key-0000000000" not in done.stdout + done.stderr


def test_check_names_a_missing_engine_key(engine: Service, tmp_path: Path) -> None:
    done = run_check({"KB_ENGINE_URL": engine.url, "KB_UPLOAD_DIR": str(tmp_path)})
    assert done.returncode == 1 and "KB_API_KEY is not set" in done.stdout


@pytest.mark.parametrize("as_json", [True, False])
def test_the_engine_logs_as_kb_log_json_says(tmp_path: Path, as_json: bool) -> None:
    from kb_bridge.testing.processes import start_engine

    engine = start_engine(tmp_path, tmp_path / "data", env={"KB_LOG_JSON": str(as_json).lower(), "KB_ENGINE_EMBEDDER": "none"})
    try:
        requests.get(engine.url + "/api/v1/status", timeout=5).raise_for_status()
        wait_until(lambda: "kb engine ready" in engine.log(), 30, what="the ready line")
    finally:
        engine.stop()
    lines = [line for line in engine.log().splitlines() if line.strip()]
    ready = next(line for line in lines if "kb engine ready" in line)
    if as_json:
        import json

        assert all(line.startswith("{") for line in lines), lines
        assert json.loads(ready)["logger"] == "kb_bridge.local_engine.server"
    else:
        assert not any(line.startswith("{") for line in lines)
        assert " INFO kb_bridge.local_engine.server: kb engine ready" in ready


def test_check_fails_on_an_old_engine(tmp_path: Path) -> None:
    with StandInEngine(version="2.9.1") as old:
        done = run_check({"KB_ENGINE_URL": old.url, "KB_UPLOAD_DIR": str(tmp_path)})
    assert done.returncode == 1 and "2.9.1 is older than 3.0.0" in done.stdout


def test_check_reports_a_bad_setting_by_name() -> None:
    done = run_check({"KB_ENGINE_TIMEOUT": "soon"})
    assert done.returncode == 2 and "KB_ENGINE_TIMEOUT" in done.stderr


@pytest.mark.anyio
@pytest.mark.parametrize("worker_class", ["uvicorn", "asgi"])
async def test_both_worker_classes_serve_and_stop_cleanly(tmp_path: Path, worker_class: str) -> None:
    with StandInEngine() as engine:
        bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": engine.url, "KB_MCP_API_KEY": TOKEN, "KB_WORKER_CLASS": worker_class}, workers=1)
        try:
            async with connect(bridge.url, TOKEN) as client:
                result = await client.call_tool("kb_search", {"query": "worker"})
        finally:
            code = bridge.stop()
    assert not result.is_error and result.structured_content["query"] == "worker"
    assert code == 0


def test_a_key_in_a_request_path_is_written_as_stars_whatever_else_the_path_holds(tmp_path: Path) -> None:
    """The access line looked for the raw path in the encoded line to redact it: a path with a newline, a quote or
    a character beyond ASCII (all escaped by the line's JSON) was not found, and the key in it was written whole."""
    with StandInEngine() as engine:
        bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY,
                                         "KB_MCP_API_KEY": TOKEN}, workers=1)
        try:
            paths = [f"/{ENGINE_KEY}%0A", f"/%C3%A9{TOKEN}", f"/ui/{TOKEN}%22", f"/{ENGINE_KEY}"]
            for path in paths:
                assert requests.get(bridge.url + path, timeout=5).status_code == 404
            wait_until(lambda: bridge.log().count('"status": 404') >= len(paths), 10, what="the access lines")
        finally:
            bridge.stop()
        log = bridge.log_path.read_text()
    assert ENGINE_KEY[:12] not in log and TOKEN[:12] not in log
    assert '"path": "/***\\n"' in log and '"path": "/\\u00e9***"' in log
