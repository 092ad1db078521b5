"""Time filters end to end: the official MCP client → kb-bridge under gunicorn → the real local engine on
SQLite and on PostgreSQL (with its model, so every search mode runs). Documents are placed in time with the
engine's import fields (POST /jobs created_at/updated_at, engine 3.8), so nothing waits for a clock.
Also: an engine that does not apply the bounds (a stand-in reporting 3.7.0) is ENGINE_UNSUPPORTED."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import requests
from mcp import Client

from kb_bridge.testing.postgres import PostgresServer
from kb_bridge.testing.processes import Service, start_bridge, start_engine, wait_until
from kb_bridge.testing.standin import StandInEngine
from kb_bridge.testing.processes import ENGINE_KEY
from kb_bridge.testing.mcp_client import call, connect

pytestmark = pytest.mark.anyio

TOKEN = "time-filters-token-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {ENGINE_KEY}"}
COLLECTION = "times"
MODES = ("hybrid", "fts", "vector")


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _add(engine: Service, text: str, title: str, **times: str) -> int:
    body = {"text": text, "title": title, "tags": [f"collection:{COLLECTION}"], **times}
    job = requests.post(f"{engine.url}/api/v1/jobs", json=body, headers=HEADERS, timeout=30).json()

    def done() -> Any:
        found = requests.get(f"{engine.url}/api/v1/jobs/{job['id']}", headers=HEADERS, timeout=30).json()
        return found["document_id"] if found["status"] == "done" else None

    wait_until(lambda: bool(done()), 120, what=f"{title} indexed")
    return int(done())


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A bridge in front of an engine holding known documents: fresh (2 h old), week (3 days), edited
    (created 40 days ago, updated yesterday), old (2020), and five notes of now that match "wagtail" best."""
    tmp = tmp_path_factory.mktemp(f"times-{request.param}")
    started: list[Service] = []
    server = PostgresServer().start() if request.param == "postgresql" else None
    try:
        env = {"KB_API_KEY": ENGINE_KEY}
        if server is not None:
            env["KB_ENGINE_DATABASE_URL"] = server.new_database()
        engine = start_engine(tmp, tmp / "data", env)
        started.append(engine)
        wait_until(lambda: "vector" in requests.get(f"{engine.url}/api/v1/status", headers=HEADERS, timeout=30)
                   .json()["search_modes"], 180, what="the model loaded")
        now = datetime.now(timezone.utc)
        at = {"fresh": (now - timedelta(hours=2),) * 2, "week": (now - timedelta(days=3),) * 2,
              "edited": (now - timedelta(days=40), now - timedelta(days=1)),
              "old": (datetime(2020, 1, 1, tzinfo=timezone.utc),) * 2}
        ids = {name: _add(engine, f"A wagtail was seen by the river ({name}).", name, created_at=_iso(created),
                          updated_at=_iso(updated)) for name, (created, updated) in at.items()}
        crowd = {_add(engine, f"Wagtail wagtail wagtails: pied wagtail number {n} wags its tail.", f"crowd {n}")
                 for n in range(5)}
        bridge = start_bridge(tmp, {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_MCP_API_KEY": TOKEN},
                              workers=1)
        started.append(bridge)
        yield {"bridge": bridge, "ids": ids, "crowd": crowd, "times": {k: tuple(map(_iso, v)) for k, v in at.items()}}
    finally:
        for service in reversed(started):
            service.stop()
        if server is not None:
            server.stop()



async def found(client: Client, mode: str, **arguments: Any) -> set[int]:
    answer = await call(client, "kb_search", {"query": "wagtail by the river", "collection": COLLECTION,
                                              "mode": mode, "top": 20, **arguments})
    assert answer["mode"] == mode
    return {hit["document_id"] for hit in answer["results"]}


@pytest.mark.parametrize("mode", MODES)
async def test_search_filters_by_created_and_updated_with_dates_and_spans(stack: dict[str, Any], mode: str) -> None:
    ids, crowd = stack["ids"], stack["crowd"]
    async with connect(stack["bridge"].url, TOKEN) as client:
        assert await found(client, mode) == set(ids.values()) | crowd
        assert await found(client, mode, since="7d") == {ids["fresh"], ids["week"]} | crowd
        assert await found(client, mode, since="1w", time_field="updated") == {ids["fresh"], ids["week"], ids["edited"]} | crowd
        assert await found(client, mode, until="30d") == {ids["edited"], ids["old"]}
        assert await found(client, mode, since="180m", until="60m") == {ids["fresh"]}
        assert await found(client, mode, since="36h", time_field="updated") == {ids["fresh"], ids["edited"]} | crowd
        # A bare date in until includes that day.
        assert await found(client, mode, since="2019-12-31", until="2020-01-01") == {ids["old"]}
        # 2020-01-01T00:00Z, the old note's time exactly: since includes it, until leaves it out.
        assert await found(client, mode, since="2019-12-31T23:00:00-01:00", time_field="updated") == \
            set(ids.values()) | crowd
        assert await found(client, mode, until="2020-01-01T00:00:00Z") == set()  # exclusive


@pytest.mark.parametrize("mode", MODES)
async def test_the_top_hits_inside_the_range_come_back_and_carry_both_times(stack: dict[str, Any], mode: str) -> None:
    """The crowd outranks the old note; filtered to 2020, top 1 is still the old note: filtering happens
    before the cut to top, not after it."""
    async with connect(stack["bridge"].url, TOKEN) as client:
        unfiltered = await call(client, "kb_search", {"query": "wagtail wagtails", "collection": COLLECTION,
                                                      "mode": mode, "top": 1})
        assert unfiltered["results"][0]["document_id"] != stack["ids"]["old"]
        answer = await call(client, "kb_search", {"query": "wagtail wagtails", "collection": COLLECTION,
                                                  "mode": mode, "top": 1, "until": "2021-01-01"})
        (hit,) = answer["results"]
        assert hit["document_id"] == stack["ids"]["old"]
        assert (hit["created_at"], hit["updated_at"]) == stack["times"]["old"]
        edited = await call(client, "kb_search", {"query": "wagtail river", "collection": COLLECTION, "mode": mode,
                                                  "top": 1, "since": "41d", "until": "39d"})
        assert [(h["document_id"], h["created_at"], h["updated_at"]) for h in edited["results"]] == \
            [(stack["ids"]["edited"], *stack["times"]["edited"])]


async def test_listing_filters_by_time_and_carries_both_times(stack: dict[str, Any]) -> None:
    ids, times = stack["ids"], stack["times"]
    async with connect(stack["bridge"].url, TOKEN) as client:
        listing = await call(client, "kb_list", {"collection": COLLECTION, "since": "2d", "time_field": "updated",
                                                 "limit": 100})
        assert {d["id"] for d in listing["documents"]} == {ids["fresh"], ids["edited"]} | stack["crowd"]
        assert listing["total"] == 7
        old = await call(client, "kb_list", {"collection": COLLECTION, "until": "2020-12-31"})
        assert [(d["id"], d["created_at"], d["updated_at"]) for d in old["documents"]] == [(ids["old"], *times["old"])]
        week = await call(client, "kb_list", {"collection": COLLECTION, "since": "4d", "until": "2d"})
        assert [d["id"] for d in week["documents"]] == [ids["week"]]


@pytest.mark.parametrize(("arguments", "field"), [({"since": "soon"}, "since"), ({"until": "2026-02-30"}, "until"),
                                                   ({"since": "1d", "until": "2d"}, "since"),
                                                   ({"since": "1d", "time_field": "edited"}, "time_field")])
async def test_bad_time_arguments_are_validation_errors_naming_the_field(stack: dict[str, Any], arguments: dict[str, Any],
                                                                         field: str) -> None:
    async with connect(stack["bridge"].url, TOKEN) as client:
        for tool, base in (("kb_search", {"query": "wagtail"}), ("kb_list", {})):
            result = await client.call_tool(tool, {**base, **arguments})
            error = result.structured_content["error"]
            assert result.is_error and error["code"] == "VALIDATION_ERROR" and error["field"] == field, error


async def test_an_engine_before_3_8_is_engine_unsupported_naming_its_version(tmp_path: Path) -> None:
    with StandInEngine(version="3.7.0") as engine:
        engine.custom = lambda method, path: (200, {"documents": [], "total": 0}) \
            if path.startswith("/api/v1/documents") else None
        bridge = start_bridge(tmp_path, {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY,
                                         "KB_MCP_API_KEY": TOKEN}, workers=1)
        try:
            async with connect(bridge.url, TOKEN) as client:
                for tool, base in (("kb_search", {"query": "wagtail"}), ("kb_list", {})):
                    result = await client.call_tool(tool, {**base, "since": "7d"})
                    error = result.structured_content["error"]
                    assert result.is_error and error["code"] == "ENGINE_UNSUPPORTED", error
                    assert "3.7.0" in error["message"] and "3.8.0" in error["message"]
                    plain = await client.call_tool(tool, base)  # without time arguments it still serves
                    assert not plain.is_error, plain.content
        finally:
            bridge.stop()
