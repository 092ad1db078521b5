"""The acceptance scenarios of the core tools (search, notes and collections, the three-step upload, note
updates, get, status, jobs), scenario by scenario, through the real MCP server in process.

Every test runs in both protocol eras (handshake and 2026-07-28). The engine is faked where
requests sends; the end-to-end versions against the real local engine are in tests/e2e.
"""

from __future__ import annotations

import base64
import hashlib
import time
from urllib.parse import parse_qs, urlsplit

import pytest
import responses
from mcp import Client

from kb_bridge.auth.principal import LOCAL
from kb_bridge.runtime import Bridge
from kb_bridge.testing.fake_engine import API
from kb_bridge.testing.fake_engine import body, calls_to, chunk, document, job, search_response

pytestmark = pytest.mark.anyio


# --- Requirement: Search tool ---------------------------------------------------------------------


async def test_search_posts_to_engine_and_returns_chunks_with_metadata(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/search", json=search_response(chunk(tags=["collection:documents", "pensions"])))
    result = await client.call_tool("kb_search", {"query": "pension revaluation", "top": 5})
    assert not result.is_error
    assert body(engine.calls[0]) == {"query": "pension revaluation", "top_n": 5}
    hit = result.structured_content["results"][0]
    assert hit["text"] == "some text" and hit["score"] == 0.03
    assert hit["document_id"] == 42 and hit["title"] == "report.pdf" and hit["doc_type"] == "pdf"
    assert hit["tags"] == ["pensions"]
    assert "some text" in result.content[0].text


async def test_search_hits_carry_the_engines_snippet_or_null(client: Client, engine: responses.RequestsMock) -> None:
    snippet = {"text": "use git switch", "start": 3, "highlights": [[4, 7], [8, 14]]}
    broken = {"text": "short", "start": 0, "highlights": [[2, 9]]}  # past its text: not passed on
    engine.post(f"{API}/search", json=search_response(chunk(chunk_id=1, snippet=snippet),
                                                        chunk(chunk_id=2, snippet=broken), chunk(chunk_id=3)))
    result = await client.call_tool("kb_search", {"query": "git switch"})
    assert not result.is_error  # the client validated the results against the output schema
    assert [hit["snippet"] for hit in result.structured_content["results"]] == [snippet, None, None]


async def test_search_with_collection_filter_adds_collection_tag(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/search", json=search_response())
    await client.call_tool("kb_search", {"query": "email preferences", "collection": "memory"})
    assert body(engine.calls[0])["tags"] == ["collection:memory"]


async def test_search_combines_tags_and_collection(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/search", json=search_response())
    await client.call_tool("kb_search", {"query": "feedback", "tags": ["email"], "collection": "memory"})
    assert sorted(body(engine.calls[0])["tags"]) == ["collection:memory", "email"]


async def test_search_results_strip_collection_tags(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/search", json=search_response(chunk(tags=["collection:memory", "feedback", "email"])))
    result = await client.call_tool("kb_search", {"query": "feedback"})
    hit = result.structured_content["results"][0]
    assert hit["collection"] == "memory"
    assert hit["tags"] == ["feedback", "email"]


async def test_search_with_mode_override_passes_fts_only(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/search", json=search_response(mode="fts"))
    result = await client.call_tool("kb_search", {"query": "error log", "fts_only": True})
    assert body(engine.calls[0])["fts_only"] is True
    assert result.structured_content["mode"] == "fts"


# --- Requirement: Add note tool / collections --------------------------------------------------------


async def test_addnote_default_collection_is_documents_and_returns_job_id(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(id=11))
    engine.post(f"{API}/search", json={"query": "q", "mode": "vector", "results": []})
    result = await client.call_tool("kb_addnote", {"text": "User prefers concise responses"})
    sent = engine.calls[0]
    assert body(sent) == {"text": "User prefers concise responses", "tags": ["collection:documents"],
                          "changed_by": "local", "unique_in": "collection:documents"}
    assert sent.request.headers["Idempotency-Key"]
    assert result.structured_content == {"job_id": 11, "status": "queued", "document_id": None, "collection": "documents",
                                         "tags": [], "duplicate_of": None, "similar": []}


async def test_a_duplicate_answers_the_tags_of_the_note_that_has_the_text_not_the_calls(
        client: Client, engine: responses.RequestsMock) -> None:
    """Nothing of a duplicate call is stored: the answer named this call's tags as the existing note's ("document
    #42 in collection memory, tags: urgent already has this text"), so an agent took them as set."""
    engine.post(f"{API}/jobs", status=200, json={**job(id=4, status="done", document_id=42), "duplicate_of": 42})
    engine.get(f"{API}/documents/42", json=document(42, tags=["collection:memory", "old"]))
    result = await client.call_tool("kb_addnote", {"text": "User prefers tea", "collection": "memory",
                                                   "tags": ["urgent"]})
    assert result.structured_content["duplicate_of"] == 42 and result.structured_content["tags"] == ["old"]
    text = result.content[0].text
    assert "urgent" not in text and "tags: old" in text and "not applied" in text


async def test_addnote_to_specific_collection_with_tags(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job())
    args = {"text": "User prefers concise responses", "collection": "memory", "tags": ["feedback"]}
    result = await client.call_tool("kb_addnote", args)
    assert body(engine.calls[0])["tags"] == ["collection:memory", "feedback"]
    assert result.structured_content["collection"] == "memory"


async def test_addnote_refuses_a_second_collection_smuggled_in_tags(client: Client, engine: responses.RequestsMock) -> None:
    result = await client.call_tool("kb_addnote", {"text": "x", "collection": "memory", "tags": ["collection:documents"]})
    assert result.is_error
    assert result.structured_content["error"]["field"] == "tags"
    assert not engine.calls


# --- Requirement: Update note tool ------------------------------------------------------------------


async def test_update_existing_note_patches_and_returns_document(client: Client, engine: responses.RequestsMock) -> None:
    updated = document(42, version=2, tags=["collection:memory", "prefs"])
    engine.patch(f"{API}/notes/42", json=updated)
    text = "Updated preference: user prefers bullet points"
    result = await client.call_tool("kb_update_note", {"document_id": 42, "text": text})
    assert body(engine.calls[0]) == {"text": text, "changed_by": "local"}
    assert result.structured_content["id"] == 42 and result.structured_content["version"] == 2
    assert result.structured_content["collection"] == "memory" and result.structured_content["tags"] == ["prefs"]


async def test_update_nonexistent_document_is_not_found(client: Client, engine: responses.RequestsMock) -> None:
    engine.patch(f"{API}/notes/999", status=404, json={"error": {"code": "not_found", "message": "no such document"}})
    engine.get(f"{API}/status", json={"version": "3.0.0"})
    result = await client.call_tool("kb_update_note", {"document_id": 999, "text": "x"})
    assert result.is_error
    assert result.structured_content["error"]["code"] == "NOT_FOUND"
    assert "999" in result.structured_content["error"]["message"]


async def test_update_non_note_document_says_only_notes(client: Client, engine: responses.RequestsMock) -> None:
    engine.patch(f"{API}/notes/5", status=409, json={"error": {"code": "not_a_note", "message": "document 5 is a pdf"}})
    result = await client.call_tool("kb_update_note", {"document_id": 5, "text": "x"})
    assert result.is_error
    assert result.structured_content["error"]["code"] == "NOT_A_NOTE"
    assert "only notes" in result.content[0].text


# --- Requirement: Get document tool --------------------------------------------------------------------


async def test_get_by_id_returns_details_with_chunks(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents/42", json=document(42, content="full text", chunks=[{"id": 901, "index": 0, "text": "full text"}]))
    engine.get(f"{API}/documents/42/versions", json={"id": 42, "versions": [
        {"version": 2, "updated_at": "2026-01-02T00:00:00Z", "changed_by": "bob", "current": True},
        {"version": 1, "updated_at": "2026-01-01T00:00:00Z", "changed_by": None, "current": False}]})
    result = await client.call_tool("kb_get", {"document_id": 42})
    doc = result.structured_content["documents"][0]
    assert doc["content"] == "full text"
    assert doc["chunks"] == [{"id": 901, "index": 0, "text": "full text"}]
    assert doc["versions"] == [{"version": 2, "updated_at": "2026-01-02T00:00:00Z", "changed_by": "bob"},
                               {"version": 1, "updated_at": "2026-01-01T00:00:00Z", "changed_by": None}]


async def test_get_a_version_reads_it_and_an_older_engine_has_no_versions(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents/42", json=document(42, version=3, content="now", chunks=[]))
    engine.get(f"{API}/documents/42?version=1", json=document(42, version=1, content="then", chunks=[]))
    engine.get(f"{API}/documents/42/versions", status=404, json={"detail": "Not Found"})
    result = await client.call_tool("kb_get", {"document_id": 42, "version": 1})
    doc = result.structured_content["documents"][0]
    assert doc["content"] == "then" and doc["version"] == 1 and doc["versions"] == []
    refused = await client.call_tool("kb_get", {"source_path": "a.md", "version": 1})
    assert refused.structured_content["error"]["field"] == "version"


async def test_get_by_source_path_filters_documents(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents", json={"documents": [document(3, source_path="memory/feedback_testing.md")], "total": 1})
    result = await client.call_tool("kb_get", {"source_path": "memory/feedback_testing.md"})
    query = parse_qs(urlsplit(engine.calls[0].request.url).query)
    assert query["source_path"] == ["memory/feedback_testing.md"]
    assert [d["id"] for d in result.structured_content["documents"]] == [3]


async def test_get_results_strip_collection_tags(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents/42", json=document(42, tags=["collection:memory", "feedback"], content="", chunks=[]))
    engine.get(f"{API}/documents/42/versions", json={"id": 42, "versions": []})
    result = await client.call_tool("kb_get", {"document_id": 42})
    doc = result.structured_content["documents"][0]
    assert doc["collection"] == "memory" and doc["tags"] == ["feedback"]


# --- Requirement: Status and jobs tools ----------------------------------------------------------------


async def test_status_returns_engine_version_model_device_counts_queue(client: Client, engine: responses.RequestsMock) -> None:
    status = {
        "version": "3.0.0", "api": "v1", "model": {"name": "all-MiniLM-L6-v2", "dim": 384}, "device": "cpu",
        "search_modes": ["hybrid", "fts", "vector"], "documents": {"total": 10, "notes": 4, "files": 6},
        "chunks": 130, "queue": {"queued": 0, "running": 0, "done": 12, "failed": 1},
    }
    engine.get(f"{API}/status", json=status)
    result = await client.call_tool("kb_status", {})
    assert result.structured_content["engine"] == status
    assert result.structured_content["bridge"]["version"]
    assert "all-MiniLM-L6-v2" in result.content[0].text


async def test_jobs_lists_recent_jobs(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/jobs", json={"jobs": [job(2, status="done", document_id=9), job(1)], "total": 2})
    result = await client.call_tool("kb_jobs", {})
    assert [j["id"] for j in result.structured_content["jobs"]] == [2, 1]
    assert result.structured_content["total"] == 2


async def test_jobs_filter_by_status(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/jobs", json={"jobs": [job(3, status="failed", error="unsupported")], "total": 1})
    result = await client.call_tool("kb_jobs", {"status": "failed"})
    assert parse_qs(urlsplit(engine.calls[0].request.url).query)["status"] == ["failed"]
    assert result.structured_content["jobs"][0]["error"] == "unsupported"


# --- Requirement: Collection management via tags ----------------------------------------------------------


async def test_exclusive_collection_move_is_one_conditional_step(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents/42", json=document(42, tags=["collection:documents", "x"], version=3))
    engine.patch(f"{API}/documents/42/tags", json={"id": 42, "tags": ["collection:memory", "x"], "version": 4})
    result = await client.call_tool("kb_update_note", {"document_id": 42, "collection": "memory"})
    tag_calls = [c for c in engine.calls if "/tags" in c.request.url]
    assert [c.request.method for c in tag_calls] == ["PATCH"]
    assert body(tag_calls[0]) == {"add": ["collection:memory"], "remove": ["collection:documents"]}
    assert tag_calls[0].request.headers["If-Match"] == '"3"'
    assert not result.is_error


async def test_exclusive_collection_on_an_engine_without_patch_removes_then_adds(client: Client, engine: responses.RequestsMock) -> None:
    # The spec's order: "SHALL first remove collection:documents via the engine's tag API, then add collection:memory".
    engine.get(f"{API}/documents/42", json=document(42, tags=["collection:documents", "x"], version=3))
    engine.patch(f"{API}/documents/42/tags", status=405, json={"detail": "Method Not Allowed"})
    engine.delete(f"{API}/documents/42/tags/collection%3Adocuments", json={"id": 42, "tags": ["x"], "version": 4})
    engine.post(f"{API}/documents/42/tags", json={"id": 42, "tags": ["collection:memory", "x"], "version": 5})
    result = await client.call_tool("kb_update_note", {"document_id": 42, "collection": "memory"})
    tag_calls = [(c.request.method, c.request.url) for c in engine.calls if "/tags" in c.request.url]
    assert tag_calls == [
        ("PATCH", f"{API}/documents/42/tags"),
        ("DELETE", f"{API}/documents/42/tags/collection%3Adocuments"),
        ("POST", f"{API}/documents/42/tags"),
    ]
    assert body(calls_to(engine, "POST", "/documents/42/tags")[0]) == {"tags": ["collection:memory"]}
    assert not result.is_error


# --- Requirement: Chunked file upload tools -----------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_upload_start_creates_staging_entry_and_id(client: Client, bridge: Bridge) -> None:
    args = {"filename": "report.pdf", "total_size": 5242880, "tags": ["insurance"], "collection": "documents"}
    result = await client.call_tool("kb_upload_start", args)
    upload_id = result.structured_content["upload_id"]
    assert len(upload_id) == 32
    staged = bridge.uploads.get(upload_id, LOCAL.owner)
    assert staged.filename == "report.pdf" and staged.tags == ["collection:documents", "insurance"]


async def test_upload_chunks_in_sequence_are_stored_and_tracked(client: Client, bridge: Bridge) -> None:
    start = await client.call_tool("kb_upload_start", {"filename": "a.txt", "total_size": 6})
    upload_id = start.structured_content["upload_id"]
    first = await client.call_tool("kb_upload_chunk", {"upload_id": upload_id, "data": _b64(b"abc"), "chunk_index": 0})
    second = await client.call_tool("kb_upload_chunk", {"upload_id": upload_id, "data": _b64(b"def"), "chunk_index": 1})
    assert first.structured_content["received_bytes"] == 3
    assert second.structured_content["received_bytes"] == 6
    assert b"".join(bridge.uploads.read_chunks(upload_id, LOCAL.owner, 2)) == b"abcdef"


async def test_upload_finish_forwards_multipart_with_tags(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(21, type="file", filename="report.txt"))
    start = await client.call_tool(
        "kb_upload_start", {"filename": "report.txt", "total_size": 9, "tags": ["insurance"], "collection": "memory"}
    )
    upload_id = start.structured_content["upload_id"]
    for index, piece in enumerate([b"abc", b"def", b"ghi"]):
        await client.call_tool("kb_upload_chunk", {"upload_id": upload_id, "data": _b64(piece), "chunk_index": index})
    result = await client.call_tool("kb_upload_finish", {"upload_id": upload_id})
    assert result.structured_content == {
        "job_id": 21, "status": "queued", "filename": "report.txt", "size_bytes": 9,
        "sha256": hashlib.sha256(b"abcdefghi").hexdigest(),
    }
    sent = engine.calls[0].request
    assert sent.headers["Content-Type"].startswith("multipart/form-data; boundary=")
    assert sent.headers["Idempotency-Key"] == f"kb-bridge-upload-{upload_id}"
    payload = b"".join(sent.body) if not isinstance(sent.body, bytes) else sent.body
    assert b"abcdefghi" in payload
    assert b'name="tags"\r\n\r\ncollection:memory\r\n' in payload and b"insurance" in payload


@pytest.mark.parametrize("tool", ["kb_upload_chunk", "kb_upload_finish"])
async def test_upload_with_invalid_id_is_not_found(client: Client, tool: str) -> None:
    args = {"upload_id": "0" * 32}
    if tool == "kb_upload_chunk":
        args |= {"data": _b64(b"x"), "chunk_index": 0}
    result = await client.call_tool(tool, args)
    assert result.is_error
    assert result.structured_content["error"]["code"] == "NOT_FOUND"
    assert "upload" in result.structured_content["error"]["message"]


async def test_abandoned_upload_is_cleaned_up_after_ttl(client: Client, bridge: Bridge) -> None:
    start = await client.call_tool("kb_upload_start", {"filename": "a.txt", "total_size": 3})
    upload_id = start.structured_content["upload_id"]
    await client.call_tool("kb_upload_chunk", {"upload_id": upload_id, "data": _b64(b"abc"), "chunk_index": 0})
    ttl = bridge.settings.uploads.ttl_seconds
    assert ttl == 600  # an idle upload expires after 10 minutes by default
    assert bridge.uploads.sweep(ttl, now=time.time() + ttl - 5) == 0
    assert bridge.uploads.sweep(ttl, now=time.time() + ttl + 5) == 1
    result = await client.call_tool("kb_upload_finish", {"upload_id": upload_id})
    assert result.structured_content["error"]["code"] == "NOT_FOUND"
