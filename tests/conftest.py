"""Shared fixtures: settings → bridge → MCP server → an in-process MCP client per protocol era.

Unit tests fake the engine where `requests` sends (the `engine` fixture, a responses mock);
end-to-end tests under tests/e2e start real processes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import responses
from mcp import Client

from kb_bridge.mcp_server import build_server
from kb_bridge.runtime import Bridge
from kb_bridge.settings import EngineSettings, McpSettings, Settings, UploadSettings

ENGINE = "http://127.0.0.1:8000"
API = ENGINE + "/api/v1"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    """Test settings: no waiting between retries, staging under tmp_path."""
    engine = EngineSettings(retry_backoff=0, retry_max_wait=0, **overrides.pop("engine", {}))
    uploads = UploadSettings(dir=str(tmp_path / "uploads"), **overrides.pop("uploads", {}))
    mcp = McpSettings(**overrides.pop("mcp", {}))
    return Settings(engine=engine, uploads=uploads, mcp=mcp, **overrides)


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
