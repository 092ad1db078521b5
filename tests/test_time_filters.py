"""kb_search and kb_list `since` / `until` / `time_field`: resolved to the engine's time bounds, refused
naming the field when wrong, and ENGINE_UNSUPPORTED (never unfiltered results) from an engine that does not
apply them. Through the real MCP server in process, engine faked."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import responses
from mcp import Client

from kb_bridge.tools.time_range import engine_bounds
from kb_bridge.testing.fake_engine import API
from kb_bridge.testing.fake_engine import chunk, document

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 5, 10, 12, 0, tzinfo=timezone.utc)
APPLIED = {"time_filters": {}}


@pytest.mark.parametrize(("since", "until", "field", "expected"), [
    ("2026-04-01", "2026-04-30", "created",
     {"created_after": "2026-04-01T00:00:00.000Z", "created_before": "2026-05-01T00:00:00.000Z"}),
    ("2026-04-01T09:30:00+02:00", None, "updated", {"updated_after": "2026-04-01T07:30:00.000Z"}),
    ("2026-04-01T09:30", None, "created", {"created_after": "2026-04-01T09:30:00.000Z"}),  # UTC without offset
    ("30m", "36h", "updated", {"updated_after": "2026-05-10T11:30:00.000Z", "updated_before": "2026-05-09T00:00:00.000Z"}),
    ("2w", None, "created", {"created_after": "2026-04-26T12:00:00.000Z"}),
    (None, "7d", "created", {"created_before": "2026-05-03T12:00:00.000Z"}),
    (None, None, "updated", {}),
    # Stored times are whole milliseconds: a bound between two is rounded up, so since leaves out the note of
    # …57.248 and until keeps it (truncation did the reverse of both).
    ("2026-04-01T09:30:57.2485Z", None, "created", {"created_after": "2026-04-01T09:30:57.249Z"}),
    (None, "2026-04-01T09:30:57.248001Z", "created", {"created_before": "2026-04-01T09:30:57.249Z"}),
    (None, "2026-04-01T09:30:57.248Z", "created", {"created_before": "2026-04-01T09:30:57.248Z"}),
    # The end of the last day the engine writes is its last millisecond, not an overflow.
    (None, "9999-12-31", "updated", {"updated_before": "9999-12-31T23:59:59.999Z"}),
    ("9999-12-31T23:59:59.9995Z", None, "updated", {"updated_after": "9999-12-31T23:59:59.999Z"}),
    # An offset that takes a time past either end of the years 0001-9999 in UTC bounds as that end does (it was
    # an OverflowError, INTERNAL_ERROR to the agent).
    ("0001-01-01T00:00+14:00", "9999-12-31T23:59-14:00", "created",
     {"created_after": "0001-01-01T00:00:00.000Z", "created_before": "9999-12-31T23:59:59.999Z"}),
    ("9999-12-31T23:59:59-00:01", None, "updated", {"updated_after": "9999-12-31T23:59:59.999Z"}),
    # RFC 3339 (5.6) lets T and Z be lower case; they were refused.
    ("2026-04-01t09:30:00z", None, "created", {"created_after": "2026-04-01T09:30:00.000Z"}),
])
def test_since_and_until_become_the_engines_bounds(since: str | None, until: str | None, field: str,
                                                    expected: dict[str, str]) -> None:
    if since == "30m":  # since 30 minutes ago, until 36 hours ago: since is later
        with pytest.raises(Exception, match="since"):
            engine_bounds(since, until, field, NOW)
        return
    assert engine_bounds(since, until, field, NOW) == expected


def search_body(engine: responses.RequestsMock) -> dict[str, Any]:
    return dict(json.loads(engine.calls[0].request.body))


async def test_search_sends_the_bounds_and_hits_carry_both_times(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/search", json={"mode": "fts", "results": [chunk()], **APPLIED})
    result = await client.call_tool("kb_search", {"query": "q", "since": "2026-01-01", "until": "2026-02-01T00:00:00Z",
                                                  "time_field": "updated", "mode": "fts"})
    assert not result.is_error, result.content
    body = search_body(engine)
    assert body["updated_after"] == "2026-01-01T00:00:00.000Z" and body["updated_before"] == "2026-02-01T00:00:00.000Z"
    assert "created_after" not in body and "created_before" not in body
    hit = result.structured_content["results"][0]
    assert (hit["created_at"], hit["updated_at"]) == ("2026-04-04T21:50:19Z", "2026-04-05T08:00:00Z")


async def test_search_without_time_arguments_sends_no_bounds(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/search", json={"mode": "hybrid", "results": []})  # an engine before 3.8 is fine here
    result = await client.call_tool("kb_search", {"query": "q"})
    assert not result.is_error and not set(search_body(engine)) & {"created_after", "created_before"}


async def test_list_sends_the_bounds(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents", json={"documents": [document(3)], "total": 1, **APPLIED})
    result = await client.call_tool("kb_list", {"since": "3d", "collection": "memory"})
    assert not result.is_error, result.content
    params = parse_qs(urlsplit(engine.calls[0].request.url).query)
    after = datetime.fromisoformat(params["created_after"][0].replace("Z", "+00:00"))
    assert abs(datetime.now(timezone.utc) - timedelta(days=3) - after) < timedelta(minutes=1)
    listed = result.structured_content["documents"][0]
    assert listed["created_at"] and listed["updated_at"]


@pytest.mark.parametrize(("arguments", "field"), [
    ({"since": "yesterday"}, "since"),
    ({"since": "2026-02-30"}, "since"),
    ({"until": "7 days"}, "until"),
    ({"until": "5y"}, "until"),
    ({"since": "9999999w"}, "since"),
    ({"since": "2026-03-01", "until": "2026-02-01"}, "since"),
    ({"time_field": "modified", "since": "1d"}, "time_field"),
    ({"since": ""}, "since"),
    ({"since": "\u0667d"}, "since"),  # ARABIC-INDIC DIGIT SEVEN: numbers are ASCII digits
])
@pytest.mark.parametrize("tool", ["kb_search", "kb_list"])
async def test_bad_time_arguments_name_the_field(client: Client, engine: responses.RequestsMock, tool: str,
                                                 arguments: dict[str, Any], field: str) -> None:
    result = await client.call_tool(tool, {**({"query": "q"} if tool == "kb_search" else {}), **arguments})
    assert result.is_error and result.structured_content["error"]["code"] == "VALIDATION_ERROR"
    assert result.structured_content["error"]["field"] == field, result.content
    assert len(engine.calls) == 0  # refused before the engine


@pytest.mark.parametrize("tool", ["kb_search", "kb_list"])
async def test_an_engine_that_ignores_the_bounds_is_engine_unsupported(client: Client, engine: responses.RequestsMock,
                                                                      tool: str) -> None:
    """An engine before 3.8 answers a filtered request as if unfiltered: its results never reach the agent."""
    engine.post(f"{API}/search", json={"mode": "fts", "results": [chunk()]})
    engine.get(f"{API}/documents", json={"documents": [document(3)], "total": 1})
    engine.get(f"{API}/status", json={"version": "3.7.0", "api": "v1"})
    result = await client.call_tool(tool, {**({"query": "q"} if tool == "kb_search" else {}), "since": "7d"})
    assert result.is_error and result.structured_content["error"]["code"] == "ENGINE_UNSUPPORTED"
    assert "3.7.0" in result.content[0].text and "3.8.0" in result.content[0].text
    assert result.structured_content["error"]["engine_version"] == "3.7.0"
