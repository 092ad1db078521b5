"""Processes shared by the end-to-end modules: one real local engine for the session (loading
the embedding model once), with an API key."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kb_bridge.testing.browser import chromium
from kb_bridge.testing.processes import ENGINE_KEY, Service, start_engine
from kb_bridge.testing.ts_client import ensure_node


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("engine")
    service = start_engine(tmp, tmp / "data", env={"KB_API_KEY": ENGINE_KEY})
    yield service
    service.stop()


@pytest.fixture(scope="session")
def node() -> str:
    """node, with the pinned TypeScript SDK installed (npm ci in tests/ts) if it is not yet."""
    return ensure_node()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium under Playwright, one per browser-test module (tests/e2e/test_console*.py)."""
    with chromium() as launched:
        yield launched
