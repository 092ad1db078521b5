"""Generated hostile arguments for every tool, through the real MCP server (checklist 12-16).

Invariants: no call crashes or reports INTERNAL_ERROR, no answer carries a traceback, and no
arguments reach the engine unless they pass the tool's input schema. Thousands of examples in CI.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
import responses
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from kb_bridge.tools import registry as tools
from kb_bridge.errors import InvalidArgument
from kb_bridge.protocol.server import build_server
from kb_bridge.runtime import Bridge
from kb_bridge.tools.validation import ArgumentValidator
from kb_bridge.testing.fake_engine import API, make_settings
from kb_bridge.testing.fake_engine import chunk, document, job
from kb_bridge.testing.strategies import arguments_for

SPECS = {spec.name: spec for spec in tools.ALL_TOOLS}
VALIDATORS = {name: ArgumentValidator(spec.input_schema) for name, spec in SPECS.items()}


def fake_engine(request: Any) -> tuple[int, dict[str, str], str]:
    """Plausible answers for any engine endpoint."""
    path = request.path_url.split("?")[0].removeprefix("/api/v1")
    if path == "/search":
        payload: Any = {"query": "q", "mode": "hybrid", "took_ms": 1, "results": [chunk()]}
    elif path.startswith("/jobs/"):
        payload = job(1, status="done", document_id=1)
    elif path.startswith("/jobs"):
        payload = job(1) if request.method == "POST" else {"jobs": [job(1)], "total": 1}
    elif re.fullmatch(r"/documents/\d+/tags(/.*)?", path):
        payload = {"id": 1, "tags": ["collection:documents"], "version": 2}
    elif re.fullmatch(r"/documents/\d+", path):
        payload = document(1, content="c", chunks=[{"id": 1, "index": 0, "text": "c"}])
    elif path.startswith("/documents"):
        payload = {"documents": [document(1)], "total": 1}
    elif path.startswith("/notes/"):
        payload = document(1, version=2)
    elif path.startswith("/chunks/") and path.endswith("/related"):
        payload = {"results": [chunk(2, 2)]}
    elif path.startswith("/chunks/"):
        payload = chunk(1, 1)
    elif path == "/tags":
        payload = {"tags": [{"name": "collection:documents", "documents": 1}]}
    else:
        payload = {"version": "3.1.0", "model": None, "search_modes": ["fts"], "documents": {}, "queue": {}}
    return 200, {}, json.dumps(payload)


class SyncClient:
    """An in-process MCP client on its own event-loop thread, callable from hypothesis tests."""

    def __init__(self, bridge: Bridge) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready: Future[Client] = Future()
        self._done = asyncio.Event()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(bridge),), daemon=True)
        self._thread.start()
        self._client = self._ready.result(30)

    async def _main(self, bridge: Bridge) -> None:
        self._done = asyncio.Event()
        async with Client(build_server(bridge)) as client:
            self._ready.set_result(client)
            await self._done.wait()

    def call(self, name: str, arguments: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(self._client.call_tool(name, arguments), self._loop).result(30)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._done.set)
        self._thread.join(30)


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SyncClient, responses.RequestsMock]]:
    mock = responses.RequestsMock(assert_all_requests_are_fired=False)
    mock.start()
    for method in (responses.GET, responses.POST, responses.PATCH, responses.DELETE):
        mock.add_callback(method, re.compile(re.escape(API) + r".*"), callback=fake_engine)
    client = SyncClient(Bridge(make_settings(Path(tmp_path_factory.mktemp("fuzz")))))
    try:
        yield client, mock
    finally:
        client.close()
        mock.stop()
        mock.reset()


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("name", sorted(SPECS))
def test_generated_arguments_never_crash_or_reach_the_engine_unvalidated(
    fuzz: tuple[SyncClient, responses.RequestsMock], name: str, data: st.DataObject
) -> None:
    client, engine = fuzz
    # The official client only sends object arguments; other shapes are fuzzed over raw HTTP.
    arguments = data.draw(arguments_for(SPECS[name].input_schema, dict_only=True))
    before = len(engine.calls)
    result = client.call(name, arguments)
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert "Traceback" not in text and 'File "' not in text
    if result.is_error:
        assert result.structured_content["error"]["code"] != "INTERNAL_ERROR", text
    if len(engine.calls) > before:  # the engine was called: the arguments must have been valid
        try:
            VALIDATORS[name].check(arguments)
        except InvalidArgument as exc:  # pragma: no cover - the failure being guarded against
            pytest.fail(f"{name} reached the engine with invalid arguments: {exc.message}")
