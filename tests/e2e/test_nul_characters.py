"""A NUL character (U+0000) in a tool argument, through kb-bridge under gunicorn in front of the real local
engine: refused as VALIDATION_ERROR naming the field, before any engine call (no store can keep it: PostgreSQL
text cannot hold it, so the engine refuses it on SQLite too)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from kb_bridge.testing.mcp_http import error_code, modern_call
from kb_bridge.testing.processes import Service, start_bridge
from kb_bridge.testing.processes import ENGINE_KEY

TOKEN = "nul-characters-token-0123456789abcdef"


@pytest.fixture(scope="module")
def bridge(engine: Service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp: Path = tmp_path_factory.mktemp("nul-bridge")
    service = start_bridge(tmp, {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_API_KEY": TOKEN})
    yield service
    service.stop()


def engine_jobs(engine: Service) -> int:
    reply = requests.get(f"{engine.url}/api/v1/jobs", headers={"X-API-Key": ENGINE_KEY}, timeout=30)
    return int(reply.json()["total"])


@pytest.mark.parametrize(("arguments", "field"), [
    ({"text": "herons\x00wait"}, "text"),
    ({"text": "herons wait", "title": "a\x00title"}, "title"),
    ({"text": "herons wait", "tags": ["birds", "x\x00"]}, "tags[1]"),
])
def test_a_nul_character_is_refused_naming_the_field_before_the_engine(bridge: Service, engine: Service,
                                                                      arguments: dict[str, object], field: str) -> None:
    before = engine_jobs(engine)
    reply = modern_call(bridge.url, TOKEN, "kb_addnote", arguments)
    assert error_code(reply) == "VALIDATION_ERROR", reply
    error = reply["result"]["structuredContent"]["error"]  # type: ignore[index]
    assert error["message"].startswith(field) and "U+0000" in error["message"], error
    assert engine_jobs(engine) == before  # nothing reached the engine


def test_the_engine_itself_refuses_a_nul_character_naming_the_field(engine: Service) -> None:
    """Every client of the engine, not only the bridge, gets the rule."""
    reply = requests.post(f"{engine.url}/api/v1/jobs", json={"text": "herons\x00wait"},
                          headers={"X-API-Key": ENGINE_KEY}, timeout=30)
    assert reply.status_code == 422 and reply.json()["error"]["code"] == "validation_error"
    assert reply.json()["error"]["message"].startswith("text")
