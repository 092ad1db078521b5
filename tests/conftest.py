"""Shared fixtures: settings → bridge → MCP server → an in-process MCP client per protocol era.

Unit tests fake the engine where `requests` sends (the `engine` fixture, a responses mock);
end-to-end tests under tests/e2e start real processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import responses
from hypothesis import settings as hypothesis_settings
from mcp import Client

from kb_bridge.protocol.server import build_server
from kb_bridge.runtime import Bridge
from kb_bridge.settings import Settings
from kb_bridge.testing.fake_engine import make_settings

# Generated-input tests: a quick profile by default, thousands of examples in CI (CI=true).
hypothesis_settings.register_profile("dev", max_examples=60)
hypothesis_settings.register_profile("ci", max_examples=500)
hypothesis_settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")


def pytest_configure(config: pytest.Config) -> None:
    # Started in the background by a shell without job control (`cmd &`, nohup), the test run inherits SIGINT
    # ignored, and so would every CLI the tests start: their Ctrl-C tests (tests/e2e/test_ingest.py,
    # test_ingest_sync.py, test_people_cli.py) would send a signal nobody hears. With Python's own handler
    # here, each child starts with the default again (a handled signal is reset by exec; an ignored one is not).
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
def bridge(settings: Settings) -> Bridge:
    return Bridge(settings)


@pytest.fixture
def engine() -> Iterator[responses.RequestsMock]:
    """The fake engine: register expected calls; any unregistered call fails the test."""
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        yield mock


@pytest.fixture(params=["legacy", "auto"])
def era(request: pytest.FixtureRequest) -> str:
    """Both protocol eras: the initialize handshake, and 2026-07-28 (sessionless)."""
    return str(request.param)


@pytest.fixture
async def client(bridge: Bridge, era: str) -> AsyncIterator[Client]:
    async with Client(build_server(bridge), mode=era) as connected:
        yield connected


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server on a free loopback port, for the session."""
    from kb_bridge.testing.processes import free_port, wait_until

    from kb_bridge.testing.processes import require

    server = require("redis-server")
    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    process = subprocess.Popen(
        [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)

    def up() -> bool:
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False

    try:
        wait_until(up, 10, what="redis-server")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(10)
