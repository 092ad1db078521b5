"""The browsing and maintenance tools: collections, list, delete, related, read-your-writes,
no silent overwrites — through the real MCP server in process, engine faked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import responses
from mcp import Client

from kb_bridge.protocol.server import build_server
from kb_bridge.runtime import Bridge
from kb_bridge.testing.fake_engine import API, make_settings
from kb_bridge.testing.fake_engine import body, calls_to, chunk, document, job

pytestmark = pytest.mark.anyio


def query(call: responses.Call) -> dict[str, list[str]]:
    return parse_qs(urlsplit(call.request.url).query)


# --- kb_collections ------------------------------------------------------------------------------


async def test_collections_lists_every_collection_with_counts(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/tags", json={"tags": [{"name": "collection:memory", "documents": 4}, {"name": "collection:documents", "documents": 9}]})
    result = await client.call_tool("kb_collections", {})
    assert query(engine.calls[0])["prefix"] == ["collection:"]
    assert [(c["name"], c["documents"]) for c in result.structured_content["collections"]] == [("documents", 9), ("memory", 4)]


async def test_collection_details_count_by_doc_type_and_latest_update(client: Client, engine: responses.RequestsMock) -> None:
    def documents(request: responses.PreparedRequest) -> tuple[int, dict[str, str], str]:
        import json

        params = parse_qs(urlsplit(request.url).query)
        totals = {"note": 3, "pdf": 2}
        doc_type = params.get("doc_type", [None])[0]
        total = totals.get(doc_type, 0) if doc_type else 6
        docs = [document(1, updated_at="2026-11-20T10:00:00Z")] if total else []
        return 200, {}, json.dumps({"documents": docs, "total": total})

    engine.add_callback(responses.GET, f"{API}/documents", callback=documents)
    result = await client.call_tool("kb_collections", {"name": "memory"})
    info = result.structured_content["collections"][0]
    assert info == {"name": "memory", "documents": 6, "by_doc_type": {"note": 3, "pdf": 2, "other": 1}, "latest_update": "2026-11-20T10:00:00Z"}
    assert all(query(c)["tag"] == ["collection:memory"] for c in engine.calls)


# --- kb_list -----------------------------------------------------------------------------------------


async def test_list_filters_and_paginates_with_a_cursor(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents", json={"documents": [document(i) for i in (9, 8)], "total": 3})
    engine.get(f"{API}/documents", json={"documents": [document(7)], "total": 3})
    first = await client.call_tool("kb_list", {"collection": "memory", "tags": ["a"], "doc_type": "note", "updated_since": "2026-01-01", "limit": 2})
    params = query(engine.calls[0])
    assert params["tag"] == ["collection:memory", "a"] and params["doc_type"] == ["note"]
    assert params["updated_since"] == ["2026-01-01"] and params["limit"] == ["2"] and params["offset"] == ["0"]
    cursor = first.structured_content["next_cursor"]
    assert cursor and first.structured_content["total"] == 3
    second = await client.call_tool("kb_list", {"collection": "memory", "limit": 2, "cursor": cursor})
    assert query(engine.calls[1])["offset"] == ["2"]
    assert second.structured_content["next_cursor"] is None


@pytest.mark.parametrize(("arguments", "field"), [({"cursor": "garbage!"}, "cursor"), ({"updated_since": "yesterday"}, "updated_since"), ({"updated_since": "2026-13-45"}, "updated_since")])
async def test_list_rejects_bad_cursor_and_dates(client: Client, engine: responses.RequestsMock, arguments: dict, field: str) -> None:
    result = await client.call_tool("kb_list", arguments)
    assert result.is_error and result.structured_content["error"]["field"] == field
    assert not engine.calls


# --- kb_delete -----------------------------------------------------------------------------------------


async def test_delete_is_destructive_and_idempotent(client: Client, engine: responses.RequestsMock) -> None:
    engine.delete(f"{API}/documents/5", status=204)
    engine.delete(f"{API}/documents/5", status=404, json={"error": {"code": "not_found", "message": "gone"}})
    first = await client.call_tool("kb_delete", {"document_id": 5})
    second = await client.call_tool("kb_delete", {"document_id": 5})
    assert first.structured_content == {"document_id": 5, "deleted": True}
    assert second.structured_content == {"document_id": 5, "deleted": False} and not second.is_error
    tool = next(t for t in (await client.list_tools()).tools if t.name == "kb_delete")
    assert tool.annotations.destructive_hint and tool.annotations.idempotent_hint and not tool.annotations.read_only_hint


# --- kb_related --------------------------------------------------------------------------------------------


async def test_related_by_chunk_with_neighbouring_context(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/chunks/11", json=chunk(11, 1, score=None))
    engine.get(f"{API}/chunks/11/related", json={"results": [chunk(22, 2, chunk_index=1, score=0.8)]})
    engine.get(f"{API}/documents/2", json=document(2, content="abc", chunks=[
        {"id": 21, "index": 0, "text": "before text"}, {"id": 22, "index": 1, "text": "hit"}, {"id": 23, "index": 2, "text": "after text"}]))
    result = await client.call_tool("kb_related", {"chunk_id": 11, "top": 3, "context": True})
    assert query(engine.calls[1])["top_n"] == ["3"]
    hit = result.structured_content["results"][0]
    assert hit["chunk_id"] == 22 and hit["context"] == {"before": "before text", "after": "after text"}
    assert result.structured_content["source"] == {"chunk_id": 11, "document_id": 1}


async def test_related_by_document_uses_its_first_chunk(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents/4", json=document(4, content="x", chunks=[{"id": 41, "index": 1, "text": "b"}, {"id": 40, "index": 0, "text": "a"}]))
    engine.get(f"{API}/chunks/40", json=chunk(40, 4))
    engine.get(f"{API}/chunks/40/related", json={"results": []})
    result = await client.call_tool("kb_related", {"document_id": 4})
    assert result.structured_content["source"]["chunk_id"] == 40 and result.structured_content["results"] == []


async def test_related_without_vectors_says_so(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/chunks/11", json=chunk(11, 1))
    engine.get(f"{API}/chunks/11/related", status=409, json={"error": {"code": "conflict", "message": "no vectors"}})
    result = await client.call_tool("kb_related", {"chunk_id": 11})
    assert result.structured_content["error"]["code"] == "ENGINE_UNSUPPORTED"


# --- read your writes ---------------------------------------------------------------------------------------


async def test_addnote_wait_returns_the_document_id_once_indexed(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(8))
    engine.get(f"{API}/jobs/8", json=job(8, status="running"))
    engine.get(f"{API}/jobs/8", json=job(8, status="done", document_id=55))
    result = await client.call_tool("kb_addnote", {"text": "remember this", "wait": True})
    assert result.structured_content["status"] == "done" and result.structured_content["document_id"] == 55
    assert "document #55" in result.content[0].text


async def test_addnote_wait_reports_a_failed_job(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(8))
    engine.get(f"{API}/jobs/8", json=job(8, status="failed", error="embedding failed"))
    result = await client.call_tool("kb_addnote", {"text": "x", "wait": True})
    assert result.structured_content["error"]["code"] == "INGESTION_FAILED"
    assert "embedding failed" in result.structured_content["error"]["message"]


async def test_addnote_wait_is_bounded(tmp_path: Path, engine: responses.RequestsMock) -> None:
    bridge = Bridge(make_settings(tmp_path, mcp={"wait_seconds": 0.2}))
    engine.post(f"{API}/jobs", status=202, json=job(8))
    engine.get(f"{API}/jobs/8", json=job(8, status="queued"))
    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async with Client(build_server(bridge)) as client:
        result = await client.call_tool("kb_addnote", {"text": "x", "wait": True}, progress_callback=on_progress)
    assert not result.is_error and result.structured_content["status"] == "queued"
    assert result.structured_content["document_id"] is None
    assert progress and "job 8" in progress[0]


# --- no silent overwrites -----------------------------------------------------------------------------------------


async def test_update_with_expected_version_sends_if_match(client: Client, engine: responses.RequestsMock) -> None:
    engine.patch(f"{API}/notes/42", json=document(42, version=4))
    await client.call_tool("kb_update_note", {"document_id": 42, "text": "x", "expected_version": 3})
    assert engine.calls[0].request.headers["If-Match"] == '"3"'


async def test_update_conflict_carries_the_current_version(client: Client, engine: responses.RequestsMock) -> None:
    engine.patch(f"{API}/notes/42", status=412, json={"error": {"code": "precondition_failed", "message": "stale"}})
    engine.get(f"{API}/documents/42", json=document(42, version=7, content="", chunks=[]))
    result = await client.call_tool("kb_update_note", {"document_id": 42, "text": "x", "expected_version": 3})
    error = result.structured_content["error"]
    assert error["code"] == "CONFLICT" and error["current_version"] == 7


async def test_collection_move_checks_expected_version_first(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents/42", json=document(42, version=5))
    result = await client.call_tool("kb_update_note", {"document_id": 42, "collection": "memory", "expected_version": 4})
    assert result.structured_content["error"]["current_version"] == 5
    assert not [c for c in engine.calls if "/tags" in c.request.url]


async def test_update_on_an_engine_older_than_3_says_unsupported(client: Client, engine: responses.RequestsMock) -> None:
    engine.patch(f"{API}/notes/42", status=404, json={"detail": "Not Found"})
    engine.get(f"{API}/status", json={"version": "2.4.1"})
    result = await client.call_tool("kb_update_note", {"document_id": 42, "text": "x"})
    error = result.structured_content["error"]
    assert error["code"] == "ENGINE_UNSUPPORTED" and "2.4.1" in error["message"]


async def test_update_text_and_move_together(client: Client, engine: responses.RequestsMock) -> None:
    engine.patch(f"{API}/notes/42", json=document(42, version=2, tags=["collection:documents"]))
    engine.get(f"{API}/documents/42", json=document(42, version=2, tags=["collection:documents"]))
    engine.patch(f"{API}/documents/42/tags", json={"id": 42, "tags": ["collection:memory"], "version": 3})
    result = await client.call_tool("kb_update_note", {"document_id": 42, "text": "new", "collection": "memory"})
    assert not result.is_error
    assert body(engine.calls[0]) == {"text": "new", "changed_by": "local"}
    assert calls_to(engine, "PATCH", "/documents/42/tags")[0].request.headers["If-Match"] == '"2"'



async def test_update_tags_replaces_the_notes_own_tags_in_one_step_keeping_its_collection(
    client: Client, engine: responses.RequestsMock,
) -> None:
    engine.get(f"{API}/documents/42", json=document(42, version=3, tags=["collection:memory", "old", "kept"]))
    engine.patch(f"{API}/documents/42/tags", json={"id": 42, "tags": ["collection:memory", "kept", "new"], "version": 4})
    result = await client.call_tool("kb_update_note", {"document_id": 42, "tags": ["kept", "new"], "expected_version": 3})
    assert not result.is_error, result
    patched = calls_to(engine, "PATCH", "/documents/42/tags")
    assert body(patched[0]) == {"add": ["new"], "remove": ["old"]}
    assert patched[0].request.headers["If-Match"] == '"3"'
    reserved = await client.call_tool("kb_update_note", {"document_id": 42, "tags": ["collection:elsewhere"]})
    assert reserved.structured_content["error"]["code"] == "VALIDATION_ERROR"
    assert len(calls_to(engine, "PATCH", "/documents/42/tags")) == 1


async def test_update_tags_of_a_note_changed_since_is_a_conflict(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents/42", json=document(42, version=5, tags=["collection:memory", "old"]))
    result = await client.call_tool("kb_update_note", {"document_id": 42, "tags": ["new"], "expected_version": 4})
    assert result.structured_content["error"]["code"] == "CONFLICT"
    assert result.structured_content["error"]["current_version"] == 5
    assert not calls_to(engine, "PATCH", "/documents/42/tags")


async def test_a_move_without_the_tags_patch_removes_first_and_puts_the_old_collection_back_if_the_add_fails(
        client: Client, engine: responses.RequestsMock) -> None:
    # An engine without PATCH /documents/{id}/tags that refuses the new collection tag: its tags as they change.
    tags = ["collection:documents", "keep"]

    def read(_request: Any) -> tuple[int, dict[str, str], str]:
        return 200, {}, json.dumps(document(42, tags=sorted(tags)))

    def remove(_request: Any) -> tuple[int, dict[str, str], str]:
        tags.remove("collection:documents")
        return 200, {}, json.dumps({"id": 42, "tags": sorted(tags), "version": 2})

    def add(request: Any) -> tuple[int, dict[str, str], str]:
        added = json.loads(request.body)["tags"]
        if added == ["collection:memory"]:
            return 400, {}, json.dumps({"error": {"code": "bad_tag", "message": "refused"}})
        tags.extend(added)
        return 200, {}, json.dumps({"id": 42, "tags": sorted(tags), "version": 3})

    engine.add_callback(responses.GET, f"{API}/documents/42", callback=read)
    engine.patch(f"{API}/documents/42/tags", status=405, json={"error": {"code": "method_not_allowed", "message": "no"}})
    engine.add_callback(responses.DELETE, f"{API}/documents/42/tags/collection%3Adocuments", callback=remove)
    engine.add_callback(responses.POST, f"{API}/documents/42/tags", callback=add)
    result = await client.call_tool("kb_update_note", {"document_id": 42, "collection": "memory"})
    assert result.is_error and result.structured_content["error"]["code"] == "VALIDATION_ERROR"
    steps = [(c.request.method, c.request.url.removeprefix(f"{API}/documents/42"), c.request.body) for c in engine.calls
             if c.request.method in ("POST", "DELETE")]
    assert [(method, path) for method, path, _ in steps] == [
        ("DELETE", "/tags/collection%3Adocuments"), ("POST", "/tags"), ("POST", "/tags")]
    assert [json.loads(sent)["tags"] for _, _, sent in steps[1:]] == [["collection:memory"], ["collection:documents"]]
    assert sorted(tags) == ["collection:documents", "keep"]  # back where it was: in exactly one collection


# --- what other clients send: integer-valued floats, contradictory flags, names by rule -------------------------


async def test_integer_valued_floats_are_integers(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/search", json={"query": "q", "mode": "hybrid", "results": []})
    engine.get(f"{API}/documents/12", json=document(12, content="x", chunks=[]))
    engine.get(f"{API}/documents/12/versions", json={"id": 12, "versions": []})
    engine.delete(f"{API}/documents/12", status=204)
    engine.get(f"{API}/jobs", json={"jobs": [], "total": 0})
    assert not (await client.call_tool("kb_search", {"query": "q", "top": 1.0})).is_error
    assert body(engine.calls[0])["top_n"] == 1 and isinstance(body(engine.calls[0])["top_n"], int)
    got = await client.call_tool("kb_get", {"document_id": 12.0})
    assert got.structured_content["documents"][0]["id"] == 12
    deleted = await client.call_tool("kb_delete", {"document_id": 12.0})
    assert deleted.structured_content == {"document_id": 12, "deleted": True}
    assert not (await client.call_tool("kb_jobs", {"limit": 5.0})).is_error
    assert query(engine.calls[-1])["limit"] == ["5"]


@pytest.mark.parametrize("value", [1.5, float("inf"), 1e300])
async def test_other_floats_where_an_integer_belongs_name_the_field(client: Client, engine: responses.RequestsMock, value: float) -> None:
    result = await client.call_tool("kb_search", {"query": "q", "top": value})
    assert result.is_error and result.structured_content["error"]["field"] == "top"
    assert not engine.calls


async def test_fts_only_with_another_mode_is_refused(client: Client, engine: responses.RequestsMock) -> None:
    result = await client.call_tool("kb_search", {"query": "q", "fts_only": True, "mode": "vector"})
    error = result.structured_content["error"]
    assert result.is_error and error["code"] == "VALIDATION_ERROR" and error["field"] == "fts_only"
    assert "mode" in error["message"] and not engine.calls
    engine.post(f"{API}/search", json={"query": "q", "mode": "fts", "results": []})
    for arguments in ({"fts_only": True, "mode": "fts"}, {"fts_only": True}, {"fts_only": False, "mode": "vector"}):
        assert not (await client.call_tool("kb_search", {"query": "q", **arguments})).is_error


@pytest.mark.parametrize("name", ["Bad Name", "x" * 65, "-leading", "ünï"])
async def test_a_bad_collection_name_is_told_the_rule(client: Client, engine: responses.RequestsMock, name: str) -> None:
    for tool, arguments in (("kb_addnote", {"text": "t", "collection": name}), ("kb_search", {"query": "q", "collection": name})):
        error = (await client.call_tool(tool, arguments)).structured_content["error"]
        assert error["field"] == "collection"
        assert "1-64" in error["message"] and "lower-case" in error["message"] and "digits" in error["message"]
    assert not engine.calls


async def test_status_text_is_a_short_summary_for_people(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/status", json={
        "version": "3.2.0", "model": {"name": "all-MiniLM-L6-v2", "dim": 384}, "device": "cpu",
        "search_modes": ["hybrid", "fts", "vector"], "documents": {"total": 10, "notes": 4, "files": 6},
        "chunks": 130, "queue": {"queued": 2, "running": 1, "done": 12, "failed": 1},
    })
    text = (await client.call_tool("kb_status", {})).content[0].text
    assert "{" not in text and "'" not in text
    assert "engine 3.2.0" in text and "kb-bridge " in text and "all-MiniLM-L6-v2 on cpu" in text
    assert "10 (4 notes, 6 files), 130 chunks" in text
    assert "2 queued, 1 running, 12 done, 1 failed" in text
