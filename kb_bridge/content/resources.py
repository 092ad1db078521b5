"""MCP resources as plain data and sync functions: what `kb://` URIs name and their markdown.

    kb://document/{id}        a document: metadata and full text
    kb://chunk/{id}           one chunk, with where it comes from
    kb://collection/{name}    the documents of a collection, newest first
    kb://tag/{tag}            the documents carrying a tag, newest first

No `mcp` import here: protocol/content.py adapts these to the protocol.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from kb_bridge import collection_tags, shapes
from kb_bridge.auth.principal import Principal
from kb_bridge.client.engine import EngineClient
from kb_bridge.digits import id_number
from kb_bridge.errors import InvalidArgument, NotFound
from kb_bridge.tools import cursors, reach, render

SCHEME = "kb"
MARKDOWN = "text/markdown"
LIST_PAGE = 50
LISTING_LIMIT = 100


@dataclass(frozen=True)
class Template:
    uri_template: str
    name: str
    title: str
    description: str


TEMPLATES = (
    Template("kb://document/{id}", "document", "Document", "A document's metadata and full text"),
    Template("kb://chunk/{id}", "chunk", "Chunk", "One chunk of a document, with its source"),
    Template("kb://collection/{name}", "collection", "Collection", "The documents of a collection, newest first"),
    Template("kb://tag/{tag}", "tag", "Tag", "The documents carrying a tag, newest first"),
)


@dataclass(frozen=True)
class Listed:
    uri: str
    name: str
    title: str
    description: str


def document_uri(document_id: int) -> str:
    return f"kb://document/{document_id}"


def list_recent(engine: EngineClient, principal: Principal, cursor: str | None) -> tuple[list[Listed], str | None]:
    """One page of recent documents the principal may see, as resources, and the next cursor (None at the end)."""
    sent = cursors.decode(cursor, "cursor") if cursor is not None else None
    raw, _total, following = reach.page_of_documents(engine, principal, [], None, (), LIST_PAGE, sent)
    docs = [shapes.document(d) for d in raw]
    items = [
        Listed(
            uri=document_uri(d["id"]),
            name=f"document-{d['id']}",
            title=d["title"] or d["source_path"] or f"document {d['id']}",
            description=f"{d['doc_type'] or '?'} in {d['collection'] or '-'}, updated {d['updated_at'] or '?'}",
        )
        for d in docs
    ]
    return items, following


_EXPECTED = "expected kb://document/{id}, kb://chunk/{id}, kb://collection/{name} or kb://tag/{tag}"
_MAX_ID = 2**63 - 1


def parse(uri: str) -> tuple[str, str]:
    """(kind, value) from a kb:// URI; InvalidArgument when it is not one of ours."""
    try:
        parts = urlsplit(uri)
    except ValueError:  # e.g. an unclosed "[" taken for an IPv6 address
        raise InvalidArgument("uri", _EXPECTED) from None
    kind, value = parts.netloc, unquote(parts.path.lstrip("/"))
    if parts.scheme != SCHEME or kind not in {t.name for t in TEMPLATES} or not value or parts.query or parts.fragment:
        raise InvalidArgument("uri", _EXPECTED)
    return kind, value


def _id(kind: str, value: str) -> int:
    # Leading zeros are taken and do not count against the id's digits.
    number = id_number(value.lstrip("0") or "0", _MAX_ID)
    if number is None:
        raise InvalidArgument("uri", f"the {kind} id must be a positive integer, as in kb://{kind}/42")
    return number


def read(engine: EngineClient, principal: Principal, uri: str) -> str:
    """The markdown text of a kb:// resource, as far as the principal may see it."""
    kind, value = parse(uri)
    if kind == "document":
        return document_markdown(shapes.document(reach.visible_document(engine, principal, _id(kind, value)), full=True))
    if kind == "chunk":
        return chunk_markdown(shapes.chunk(reach.visible_chunk(engine, principal, _id(kind, value))))
    if kind == "collection":
        collection_tags.check_name(value, field="uri")
        return listing(engine, principal, f"Collection {value}", value, ())
    collection_tags.check_tag(value, field="uri")
    if collection_tags.is_collection_tag(value):
        raise InvalidArgument("uri", "use kb://collection/{name} for collections")
    return listing(engine, principal, f"Tag {value}", None, (value,))


def _meta_line(doc: dict[str, Any]) -> str:
    tags = ", ".join(doc["tags"]) or "-"
    return (
        f"- id {doc['id']} · {doc['doc_type'] or '?'} · collection {doc['collection'] or '-'} · tags {tags}\n"
        f"- source {render.one_line(doc['source_path'] or '-')} · version {doc['version'] or '?'} · "
        f"created {doc['created_at'] or '?'} · updated {doc['updated_at'] or '?'}"
    )


def document_markdown(doc: dict[str, Any]) -> str:
    title = render.one_line(doc["title"] or doc["source_path"] or f"Document {doc['id']}")
    return f"# {title}\n\n{_meta_line(doc)}\n\n{doc['content'] or ''}\n"


def chunk_markdown(chunk: dict[str, Any]) -> str:
    title = render.one_line(chunk["title"] or chunk["source_path"] or f"document {chunk['document_id']}")
    return (
        f"# Chunk {chunk['chunk_id']} of {title}\n\n"
        f"- {document_uri(chunk['document_id'])} · chunk index {chunk['chunk_index']} · "
        f"collection {chunk['collection'] or '-'} · tags {', '.join(chunk['tags']) or '-'}\n\n{chunk['text']}\n"
    )


def listing(engine: EngineClient, principal: Principal, heading: str, collection: str | None, tags: tuple[str, ...]) -> str:
    raw, total, _following = reach.page_of_documents(engine, principal, [], collection, tags, LISTING_LIMIT, None)
    docs = [shapes.document(d) for d in raw]
    if not docs:
        raise NotFound(f"no documents for {heading.lower()}")
    lines = [f"# {heading}", "", f"{total} document(s), newest update first" + (f" (first {len(docs)} shown)" if total > len(docs) else "") + ":", ""]
    for d in docs:
        title = d["title"] or d["source_path"] or f"document {d['id']}"
        lines.append(f"- [{_link_text(title)}]({document_uri(d['id'])}) · {d['doc_type'] or '?'} · updated {d['updated_at'] or '?'}")
    return "\n".join(lines) + "\n"


def _link_text(title: str) -> str:
    """A stored title as a Markdown link's text: its brackets and backslashes escaped and its line breaks made
    spaces, so that a title such as `Pay here](https://example.invalid) [x` stays text in the link to its document
    instead of making a link of its own in a listing the bridge writes."""
    return re.sub(r"([\\\[\]])", r"\\\1", render.one_line(title))

