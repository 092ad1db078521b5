"""Issue 38 item 4: kb_search, kb_list and kb_related results carry a resource_link per document, by the URI
resources/read serves (kb://document/{id}); the text and structuredContent are unchanged."""

from __future__ import annotations

import mcp_types as types
import pytest
import responses
from mcp import Client

from kb_bridge.testing.fake_engine import API
from kb_bridge.testing.fake_engine import chunk, document, search_response

pytestmark = pytest.mark.anyio


def links(result: types.CallToolResult) -> list[types.ResourceLink]:
    return [block for block in result.content if isinstance(block, types.ResourceLink)]


async def test_search_links_each_document_once_after_the_text(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/search", json=search_response(chunk(1, 42), chunk(2, 43, title=None), chunk(3, 42)))
    result = await client.call_tool("kb_search", {"query": "pension"})
    assert isinstance(result.content[0], types.TextContent)
    assert [(link.uri, link.name, link.title) for link in links(result)] == [
        ("kb://document/42", "document-42", "report.pdf"),
        ("kb://document/43", "document-43", "uploads/report.pdf"),
    ]
    assert all(link.mime_type == "text/markdown" for link in links(result))
    assert [hit["chunk_id"] for hit in result.structured_content["results"]] == [1, 2, 3]


async def test_list_links_every_listed_document(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents", json={"documents": [document(5, title="a"), document(6, title="b")], "total": 2})
    result = await client.call_tool("kb_list", {})
    assert [link.uri for link in links(result)] == ["kb://document/5", "kb://document/6"]
    assert "next_cursor" in result.structured_content


async def test_related_links_the_related_documents(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/chunks/11", json=chunk(11, 1, score=None))
    engine.get(f"{API}/chunks/11/related", json={"results": [chunk(22, 2, score=0.8)]})
    result = await client.call_tool("kb_related", {"chunk_id": 11})
    assert [link.uri for link in links(result)] == ["kb://document/2"]


async def test_a_link_opens_with_resources_read(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/search", json=search_response(chunk(1, 7)))
    engine.get(f"{API}/documents/7", json=document(7, title="Runbook", content="step one", chunks=[]))
    link = links(await client.call_tool("kb_search", {"query": "runbook"}))[0]
    read = await client.read_resource(link.uri)
    assert "step one" in read.contents[0].text


async def test_other_tools_and_empty_results_carry_no_links(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/search", json=search_response())
    assert links(await client.call_tool("kb_search", {"query": "nothing"})) == []
