"""Resources, prompts, completions and logging/setLevel through the real MCP server (engine faked)."""

from __future__ import annotations

import pytest
import responses
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import PromptReference, ResourceTemplateReference

from kb_bridge.testing.fake_engine import API
from kb_bridge.tools import cursors
from kb_bridge.testing.fake_engine import chunk, document

pytestmark = pytest.mark.anyio


async def test_resources_list_pages_recent_documents_with_cursors(client: Client, engine: responses.RequestsMock) -> None:
    # An engine before 3.14 (no `after`): offset cursors. The bridge asks for one more than a page (51).
    engine.get(f"{API}/documents", json={"documents": [document(i, title=f"t{i}") for i in range(60, 9, -1)], "total": 60})
    engine.get(f"{API}/documents", json={"documents": [document(i) for i in range(10, 0, -1)], "total": 60})
    first = await client.list_resources()
    assert len(first.resources) == 50 and first.resources[0].uri == "kb://document/60"
    assert first.resources[0].title == "t60" and first.next_cursor
    second = await client.list_resources(cursor=first.next_cursor)
    assert len(second.resources) == 10 and second.next_cursor is None
    assert "limit=51" in engine.calls[0].request.url and "offset=50" in engine.calls[1].request.url


async def test_resources_list_pages_by_the_last_documents_key(client: Client, engine: responses.RequestsMock) -> None:
    """resources/list shares kb_list's cursor: against an engine that pages by key (3.14), the next page is
    asked for after the last document returned, so notes added or deleted meanwhile move nothing."""
    engine.get(f"{API}/documents", json={"documents": [document(i, updated_at=f"2026-04-05T08:00:{i:02d}.000Z")
                                                       for i in range(59, 8, -1)], "total": 59, "after": None})
    engine.get(f"{API}/documents", json={"documents": [document(9)], "total": 59, "after": "2026-04-05T08:00:10.000Z,10"})
    first = await client.list_resources()
    second = await client.list_resources(cursor=first.next_cursor)
    assert "after=2026-04-05T08%3A00%3A10.000Z%2C10" in engine.calls[1].request.url
    assert "offset" not in engine.calls[1].request.url
    assert [r.uri for r in second.resources] == ["kb://document/9"] and second.next_cursor is None


@pytest.mark.parametrize("method", ["list_tools", "list_prompts", "list_resource_templates", "list_resources"])
async def test_every_list_answers_a_cursor_it_never_returned_with_invalid_params_naming_cursor(
    client: Client, engine: responses.RequestsMock, method: str,
) -> None:
    """The spec's SHOULD (-32602 for an invalid cursor), alike for all four lists: resources/list did, while
    tools/list, prompts/list and resources/templates/list, which answer in one page, gave the first page again."""
    with pytest.raises(MCPError) as caught:
        await getattr(client, method)(cursor="zzz")
    assert caught.value.error.code == -32602
    assert caught.value.error.message.startswith("cursor: is not a cursor this server returned")
    assert caught.value.error.data["field"] == "cursor"
    assert len(engine.calls) == 0  # refused before the engine is asked (resources/list) or with no engine (the rest)


async def test_resources_list_refuses_the_cursor_of_a_filtered_kb_list(client: Client, engine: responses.RequestsMock) -> None:
    # resources/list lists everything the caller sees: a kb_list cursor of one collection's listing went on there.
    filtered = cursors.encode(cursors.Key("2026-04-05T08:00:00.000Z", 5), {"collection": "memory"})
    with pytest.raises(MCPError) as caught:
        await client.list_resources(cursor=filtered)
    assert caught.value.error.code == -32602 and caught.value.error.data["field"] == "cursor"
    assert len(engine.calls) == 0
    engine.get(f"{API}/documents", json={"documents": [document(4)], "total": 1, "after": "x"})
    unfiltered = cursors.encode(cursors.Key("2026-04-05T08:00:00.000Z", 5), {})  # a kb_list's without filters
    assert [r.uri for r in (await client.list_resources(cursor=unfiltered)).resources] == ["kb://document/4"]


async def test_an_empty_cursor_is_no_cursor_for_every_list(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents", json={"documents": [], "total": 0})
    assert (await client.list_tools(cursor="")).tools
    assert (await client.list_prompts(cursor="")).prompts
    assert (await client.list_resource_templates(cursor="")).resource_templates
    assert (await client.list_resources(cursor="")).resources == []


async def test_resource_templates_are_listed(client: Client) -> None:
    templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
    assert templates == {"kb://document/{id}", "kb://chunk/{id}", "kb://collection/{name}", "kb://tag/{tag}"}


async def test_read_document_resource_as_markdown(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents/7", json=document(7, title="Runbook", tags=["collection:documents", "ops"], content="Roll back first.", chunks=[]))
    result = await client.read_resource("kb://document/7")
    content = result.contents[0]
    assert content.mime_type == "text/markdown"
    assert content.text.startswith("# Runbook") and "Roll back first." in content.text and "collection documents" in content.text


async def test_read_chunk_resource(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/chunks/901", json=chunk(901, 42, text="the chunk text"))
    text = (await client.read_resource("kb://chunk/901")).contents[0].text
    assert "the chunk text" in text and "kb://document/42" in text


async def test_read_collection_and_tag_listings(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents", json={"documents": [document(3, title="Prefs")], "total": 1})
    collection = (await client.read_resource("kb://collection/memory")).contents[0].text
    assert "# Collection memory" in collection and "[Prefs](kb://document/3)" in collection
    assert "tag=collection%3Amemory" in engine.calls[0].request.url
    tag = (await client.read_resource("kb://tag/email%20prefs")).contents[0].text
    assert "# Tag email prefs" in tag and "tag=email+prefs" in engine.calls[1].request.url


@pytest.mark.parametrize("uri", ["kb://document/abc", "kb://nothing/1", "http://x/document/1", "kb://document/0",
                                 "kb://[x/1", "kb://document/1?x=1", "kb://chunk/" + "9" * 30, "", "not a uri",
                                 "kb://document/" + "9" * 5000, "kb://chunk/" + "9" * 4301,
                                 "kb://tag/" + "t" * 201, "kb://tag/a%0D%0Ab", "kb://tag/a%00"])
async def test_bad_resource_uris_are_invalid_params(client: Client, uri: str) -> None:
    with pytest.raises(MCPError) as caught:
        await client.read_resource(uri)
    assert caught.value.error.code == -32602 and caught.value.error.data["uri"] == uri  # SEP-2164


async def test_a_caller_without_the_right_is_an_invalid_request_not_an_internal_error() -> None:
    """Over HTTP the door answers 403 first; any other way in meets readable_by, whose FORBIDDEN is the caller's
    fault: JSON-RPC's invalid request with the code in its data, not the server's internal error."""
    from kb_bridge.errors import Forbidden
    from kb_bridge.protocol.content import _translated

    async def refused() -> None:
        raise Forbidden("this token lacks the kb:read scope")

    with pytest.raises(MCPError) as caught:
        await _translated(refused, "kb://document/1")
    assert caught.value.error.code == -32600 and caught.value.error.data["code"] == "FORBIDDEN"


async def test_missing_document_resource_is_not_found(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/documents/9", status=404, json={"error": {"code": "not_found", "message": "x"}})
    with pytest.raises(MCPError) as caught:
        await client.read_resource("kb://document/9")
    assert caught.value.error.code == -32002 and "not found" in caught.value.error.message  # MCP: resource not found
    assert caught.value.error.data["uri"] == "kb://document/9"  # SEP-2164


async def test_prompts_are_listed_with_arguments(client: Client) -> None:
    listed = {p.name: p for p in (await client.list_prompts()).prompts}
    assert set(listed) == {"find_insights_about", "tag_exploration", "related_to_chunk", "collection_overview", "remember"}
    remember = listed["remember"]
    assert [(a.name, a.required) for a in remember.arguments] == [("fact", True), ("collection", False)]


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("find_insights_about", {"topic": "pension revaluation"}, "kb_search"),
        ("tag_exploration", {"tag": "email"}, "kb_list"),
        ("related_to_chunk", {"chunk_id": "901"}, "kb_related"),
        ("collection_overview", {"collection": "memory"}, "kb_collections"),
        ("remember", {"fact": "the user is in Lisbon"}, "collection='memory'"),
    ],
)
async def test_prompts_guide_to_the_right_tools(client: Client, name: str, arguments: dict[str, str], expected: str) -> None:
    result = await client.get_prompt(name, arguments)
    text = result.messages[0].content.text
    assert result.messages[0].role == "user" and expected in text
    assert all(value in text for value in arguments.values())


async def test_prompt_with_missing_argument_is_invalid_params(client: Client) -> None:
    with pytest.raises(MCPError) as caught:
        await client.get_prompt("find_insights_about", {})
    assert caught.value.error.code == -32602 and "topic" in caught.value.error.message


async def test_completions_offer_collections_and_tags(client: Client, engine: responses.RequestsMock) -> None:
    engine.get(f"{API}/tags", json={"tags": [{"name": "collection:memory", "documents": 1}, {"name": "collection:media", "documents": 1}, {"name": "collection:documents", "documents": 2}]})
    engine.get(f"{API}/tags", json={"tags": [{"name": "email", "documents": 1}, {"name": "engineering", "documents": 1}, {"name": "collection:memory", "documents": 1}, {"name": "ops", "documents": 1}]})
    collections = await client.complete(PromptReference(name="collection_overview"), {"name": "collection", "value": "me"})
    assert collections.completion.values == ["media", "memory"]
    tags = await client.complete(ResourceTemplateReference(uri="kb://tag/{tag}"), {"name": "tag", "value": "e"})
    assert tags.completion.values == ["email", "engineering"]


async def test_completion_of_free_text_offers_nothing(client: Client, engine: responses.RequestsMock) -> None:
    result = await client.complete(PromptReference(name="find_insights_about"), {"name": "topic", "value": "pen"})
    assert result.completion.values == [] and not engine.calls


async def test_logging_set_level_is_accepted(bridge, engine: responses.RequestsMock) -> None:  # type: ignore[no-untyped-def]
    from kb_bridge.protocol.server import build_server

    async with Client(build_server(bridge), mode="legacy") as client:
        with pytest.warns(Warning):  # the SDK marks logging deprecated for 2026-07-28 clients
            await client.set_logging_level("debug")


@pytest.mark.parametrize("ref", [PromptReference(name="no_such_prompt"), ResourceTemplateReference(uri="kb://nothing/{x}")],
                         ids=["prompt", "template"])
async def test_completion_for_a_prompt_or_template_that_does_not_exist_is_empty(
    client: Client, engine: responses.RequestsMock, ref: PromptReference | ResourceTemplateReference,
) -> None:
    """A decision (docs/protocol.md, "Prompts and completions"): the completion page's -32602 for an invalid prompt
    name is a SHOULD, and the conformance suite's completion check asks about a fixture prompt this server does not
    have, expecting a completion. An empty one, and the engine never asked."""
    result = await client.complete(ref, {"name": "x", "value": "a"})
    assert result.completion.values == [] and not engine.calls


async def test_completion_of_an_argument_a_known_prompt_has_no_values_for_is_still_empty(client: Client, engine: responses.RequestsMock) -> None:
    result = await client.complete(PromptReference(name="collection_overview"), {"name": "not_an_argument", "value": "a"})
    assert result.completion.values == [] and not engine.calls


@pytest.mark.parametrize("chunk_id", ["0", "²", "٣", "０１", "9" * 5000, str(2**53 + 1)])
async def test_a_related_to_chunk_prompt_refuses_what_kb_related_would_refuse_as_a_chunk_id(client: Client, chunk_id: str) -> None:
    """The prompt says chunk_id must be a positive integer, and steers the agent to kb_related with it; str.isdigit
    let through 0, "²", other scripts' digits and ids past the tool's bound, so the prompt told the agent to make a
    call that could only fail (prompts page: servers SHOULD validate prompt arguments, -32602)."""
    with pytest.raises(MCPError) as caught:
        await client.get_prompt("related_to_chunk", {"chunk_id": chunk_id})
    assert caught.value.error.code == -32602 and caught.value.error.data["field"] == "chunk_id"


async def test_a_related_to_chunk_prompt_takes_the_largest_chunk_id_kb_related_takes(client: Client) -> None:
    result = await client.get_prompt("related_to_chunk", {"chunk_id": str(2**53)})
    assert f"chunk_id={2**53}" in result.messages[0].content.text


def test_the_prompts_largest_chunk_id_is_the_tools() -> None:
    from kb_bridge.content.prompts import _MAX_CHUNK_ID
    from kb_bridge.tools.arguments import DOCUMENT_ID

    assert _MAX_CHUNK_ID == DOCUMENT_ID["maximum"]


async def test_a_title_cannot_make_a_link_of_its_own_in_a_listing(client: Client, engine: responses.RequestsMock) -> None:
    """A listing's Markdown is the bridge's: a stored title is the text of the link to its document, whatever it
    holds (a title written to the engine directly may hold brackets and line breaks)."""
    title = "Pay here](https://example.invalid) [x\n# Heading"
    engine.get(f"{API}/documents", json={"documents": [document(3, title=title)], "total": 1})
    text = (await client.read_resource("kb://collection/memory")).contents[0].text
    assert "Pay here](" not in text  # the link it made before
    assert r"- [Pay here\](https://example.invalid) \[x # Heading](kb://document/3)" in text


async def test_a_stored_title_or_source_with_line_breaks_stays_on_its_heading_and_meta_lines(
    client: Client, engine: responses.RequestsMock,
) -> None:
    """The bridge refuses line breaks in titles and sources, but a client writing to the engine directly can store
    them: a document's `# title` heading and its source line stay one line each, so the stored title cannot end the
    heading and start text (or a heading) of its own above the document's meta lines."""
    engine.get(f"{API}/documents/7", json=document(7, title="Runbook\n# Not the title", source_path="ops/\nrun.md",
                                                   content="Roll back first.", chunks=[]))
    engine.get(f"{API}/chunks/901", json=chunk(901, 7, title="Runbook\r\nsecond line"))
    text = (await client.read_resource("kb://document/7")).contents[0].text
    lines = text.splitlines()
    assert lines[0] == "# Runbook # Not the title" and lines[1] == ""
    assert lines[3].startswith("- source ops/ run.md · version")
    chunk_text = (await client.read_resource("kb://chunk/901")).contents[0].text
    assert chunk_text.splitlines()[0] == "# Chunk 901 of Runbook second line"


@pytest.mark.parametrize(("name", "argument"), [("find_insights_about", "topic"), ("remember", "fact"), ("tag_exploration", "tag")])
@pytest.mark.parametrize("value", ["pay\x00day", "caf\udce9"], ids=["NUL", "lone surrogate"])
async def test_a_prompt_refuses_text_no_tool_would_take_naming_the_argument(
    client: Client, engine: responses.RequestsMock, name: str, argument: str, value: str,
) -> None:
    """A prompt steers the agent to tool calls carrying its argument; the tools refuse NUL and lone surrogates
    naming the field (tools/validation.py), so the prompt does too, before it writes a message that can only
    lead to a refused call (and a lone surrogate could not be encoded in the answer at all)."""
    with pytest.raises(MCPError) as caught:
        await client.get_prompt(name, {argument: value})
    assert caught.value.error.code == -32602 and caught.value.error.data["field"] == argument
    assert not engine.calls
