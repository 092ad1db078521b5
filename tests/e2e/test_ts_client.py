"""The official TypeScript SDK client (what MCP Inspector and Claude Code are built on) against the bridge,
over Streamable HTTP (gunicorn, bearer token) and over stdio, with the real local engine behind it.

Every tool is called once to succeed and once to fail: a failure must reach the client as an `isError`
result whose text names the code (and, for a validation error, the field), never as a thrown protocol
error. That client validates structuredContent against the tool's outputSchema even for error results,
which the Python client does not. Resources, prompts and completions too. tests/ts/client.mjs runs the
steps; the expectations are here.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kb_bridge.testing.mcp_http import modern_call
from kb_bridge.testing.processes import Service, clean_env, start_bridge
from kb_bridge.testing.processes import ENGINE_KEY
from kb_bridge.testing.schema_rules import findings
from kb_bridge.testing.ts_client import Step, run, tool

TOKEN = "ts-client-token-0123456789abcdef"
NO_UPLOAD = "0" * 32


def steps() -> list[Step]:
    """One success and at least one failure per tool, then resources, prompts and completions. `$N.x`
    refers to field x of step N's result."""
    note = "$1.structuredContent.document_id"
    upload = "$19.structuredContent.upload_id"
    return [
        Step("listTools"),  # 0
        tool("kb_addnote", {"text": "The TypeScript client stores a heron fact.", "collection": "memory",
                            "title": "Heron fact", "wait": True}),  # 1
        tool("kb_addnote", {"text": ""}, "VALIDATION_ERROR", "text"),  # 2
        tool("kb_search", {"query": "heron fact", "top": 3}),  # 3
        tool("kb_search", {"query": "heron", "top": 0}, "VALIDATION_ERROR", "top"),  # 4
        tool("kb_get", {"document_id": note}),  # 5
        tool("kb_get", {"document_id": 987654321}, "NOT_FOUND"),  # 6
        tool("kb_list", {"collection": "memory"}),  # 7
        tool("kb_list", {"cursor": "not-a-cursor!"}, "VALIDATION_ERROR", "cursor"),  # 8
        tool("kb_collections", {}),  # 9
        tool("kb_collections", {"name": "Bad Name"}, "VALIDATION_ERROR", "name"),  # 10
        tool("kb_related", {"document_id": note}),  # 11
        tool("kb_related", {}, "VALIDATION_ERROR", "chunk_id"),  # 12
        tool("kb_update_note", {"document_id": note, "text": "The TypeScript client updated the heron fact."}),  # 13
        tool("kb_update_note", {"document_id": note, "text": "stale", "expected_version": 1}, "CONFLICT"),  # 14
        tool("kb_status", {}),  # 15
        tool("kb_status", {"verbose": True}, "VALIDATION_ERROR", "verbose"),  # 16
        tool("kb_jobs", {"limit": 5}),  # 17
        tool("kb_jobs", {"status": "sleeping"}, "VALIDATION_ERROR", "status"),  # 18
        tool("kb_upload_start", {"filename": "ts.txt", "total_size": 5}),  # 19
        tool("kb_upload_start", {"filename": "ts.exe", "total_size": 5}, "VALIDATION_ERROR", "filename"),  # 20
        tool("kb_upload_chunk", {"upload_id": upload, "chunk_index": 4, "data": _b64(b"xy")},
             "VALIDATION_ERROR", "chunk_index"),  # 21
        tool("kb_upload_chunk", {"upload_id": upload, "chunk_index": 0, "data": _b64(b"hello")}),  # 22
        tool("kb_upload_status", {"upload_id": upload}),  # 23
        tool("kb_upload_status", {}),  # 24
        tool("kb_upload_status", {"upload_id": NO_UPLOAD}, "NOT_FOUND"),  # 25
        tool("kb_upload_finish", {"upload_id": upload}),  # 26
        tool("kb_upload_finish", {"upload_id": NO_UPLOAD}, "NOT_FOUND"),  # 27
        tool("kb_upload_start", {"filename": "abandoned.txt", "total_size": 10}),  # 28
        tool("kb_upload_cancel", {"upload_id": "$28.structuredContent.upload_id"}),  # 29
        tool("kb_upload_cancel", {}, "VALIDATION_ERROR", "upload_id"),  # 30
        Step("listResources"),  # 31
        Step("listResourceTemplates"),  # 32
        Step("readResource", {"uri": "kb://collection/memory"}),  # 33
        Step("readResource", {"uri": "kb://[x/1"}, "rpc"),  # 34
        Step("readResource", {"uri": "kb://document/987654321"}, "rpc"),  # 35
        Step("listPrompts"),  # 36
        Step("getPrompt", {"name": "find_insights_about", "arguments": {"topic": "herons"}}),  # 37
        Step("getPrompt", {"name": "remember", "arguments": {}}, "rpc"),  # 38
        Step("complete", {"ref": {"type": "ref/prompt", "name": "collection_overview"},
                          "argument": {"name": "collection", "value": "me"}}),  # 39
        tool("kb_delete", {"document_id": note}),  # 40
        tool("kb_delete", {"document_id": "one"}, "VALIDATION_ERROR", "document_id"),  # 41
        Step("ping"),  # 42
    ]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def check(plan: list[Step], outputs: list[dict[str, Any]]) -> None:
    assert len(outputs) == len(plan)
    for number, (step, out) in enumerate(zip(plan, outputs, strict=True)):
        where = f"step {number} {step.method} {step.args.get('name', '')}: {json.dumps(out)[:600]}"
        if step.expect == "rpc":
            assert not out["ok"] and out["error"]["code"] in (-32602, -32002), where
            assert "Error" not in out["error"]["message"].split(":", 1)[-1], where  # our words, not an exception's
            continue
        assert out["ok"], where  # never a thrown protocol error
        result = out["result"]
        if step.method != "callTool":
            continue
        text = result["content"][0]["text"]
        if step.expect == "ok":
            assert result.get("isError") is not True and "structuredContent" in result, where
        else:
            assert result["isError"] is True and text.startswith(f"{step.expect}: "), where
            if step.field:
                assert step.field in text, where


def check_listing(outputs: list[dict[str, Any]]) -> None:
    tools = outputs[0]["result"]["tools"]
    assert len(tools) == 15
    for listed in tools:
        assert list(findings(listed["inputSchema"])) == [] and list(findings(listed["outputSchema"])) == [], listed["name"]
    assert "heron" in outputs[3]["result"]["content"][0]["text"].lower()
    assert outputs[24]["result"]["structuredContent"]["uploads"][0]["upload_id"] == outputs[19]["result"]["structuredContent"]["upload_id"]
    assert outputs[29]["result"]["structuredContent"]["cancelled"] is True
    assert "memory" in outputs[39]["result"]["completion"]["values"]


@pytest.fixture(scope="module")
def bridge(engine: Service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    service = start_bridge(tmp_path_factory.mktemp("ts-bridge"), {"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY,
                                                                   "KB_MCP_API_KEY": TOKEN}, workers=2)
    yield service
    service.stop()


def test_typescript_client_over_streamable_http(node: str, bridge: Service, tmp_path: Path) -> None:
    plan = steps()
    outputs = run(node, {"kind": "http", "url": bridge.url + "/mcp", "token": TOKEN}, plan, tmp_path)
    check(plan, outputs)
    check_listing(outputs)


def test_typescript_client_over_stdio(node: str, engine: Service, tmp_path: Path) -> None:
    env = clean_env({"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "KB_UPLOAD_DIR": str(tmp_path / "uploads"),
                     "KB_LOG_LEVEL": "DEBUG"})
    transport = {"kind": "stdio", "command": sys.executable, "args": ["-m", "kb_bridge", "stdio"], "env": env}
    plan = steps()
    outputs = run(node, transport, plan, tmp_path)
    check(plan, outputs)
    check_listing(outputs)


# Stored text that odd clients trip on: characters beyond the BMP (two UTF-16 units each, one code point), a
# family emoji joined by ZWJ, flags, combining marks, right-to-left text and its override, zero-width characters,
# and the line separators JSON.stringify writes raw (U+2028, U+2029, U+0085).
ODD = ("\U0001d518\U0001d52b\U0001d526 \U0001f600 \U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1e9\U0001f1ea "
       "e\u0301\u0323 \u05e9\u05dc\u05d5\u05dd \u202eevil\u202c \u200bzero\u200dwidth\ufeff line\u2028sep para\u2029sep "
       "next\u0085line. The egret wades. ")


def test_typescript_client_accepts_every_result_over_odd_stored_text(node: str, bridge: Service, tmp_path: Path) -> None:
    """The TypeScript SDK client checks each result's structuredContent against the tool's outputSchema: results
    carrying such text pass it in every tool that returns stored text, and a snippet's offsets count code points
    (docs/engine-api.md, "Chunk"), which a JavaScript string, in UTF-16 units, does not."""
    added = modern_call(bridge.url, TOKEN, "kb_addnote", {"text": ODD, "title": "\U0001f600 odd \u202etitle",
                                                         "tags": ["\U0001f426" * 200], "collection": "odd", "wait": True})
    note = added["result"]["structuredContent"]["document_id"]  # type: ignore[index]
    assert isinstance(note, int), added
    plan = [tool("kb_search", {"query": "egret", "mode": mode, "collection": "odd"}) for mode in ("hybrid", "fts", "vector")]
    plan += [tool("kb_get", {"document_id": note}), tool("kb_get", {"document_id": note, "version": 1}),
             tool("kb_list", {"collection": "odd"}), tool("kb_related", {"document_id": note, "context": True}),
             tool("kb_collections", {"name": "odd"}), tool("kb_jobs", {"limit": 5}), Step("listResources"),
             Step("readResource", {"uri": f"kb://document/{note}"}), Step("readResource", {"uri": "kb://collection/odd"})]
    outputs = run(node, {"kind": "http", "url": bridge.url + "/mcp", "token": TOKEN}, plan, tmp_path)
    check(plan, outputs)
    assert ODD in outputs[3]["result"]["structuredContent"]["documents"][0]["content"]
    [hit] = [h for h in outputs[1]["result"]["structuredContent"]["results"] if h["document_id"] == note][:1]
    snippet = hit["snippet"]
    start, end = snippet["highlights"][0]
    assert snippet["text"][start:end] == "egret"  # code points: Python indexes strings so
    assert hit["text"][snippet["start"]:snippet["start"] + len(snippet["text"])] == snippet["text"]
    in_utf16 = len(snippet["text"][:start].encode("utf-16-le")) // 2
    assert in_utf16 > start  # what a JavaScript client must convert from (Array.from(text), codePointAt)


def test_the_plan_covers_every_tool_with_a_success_and_an_error() -> None:
    from kb_bridge.tools import registry

    calls = [s for s in steps() if s.method == "callTool"]
    for spec in registry.ALL_TOOLS:
        outcomes = {s.expect == "ok" for s in calls if s.args["name"] == spec.name}
        assert outcomes == {True, False}, spec.name

