"""Prompt templates: each turns a few arguments into a message that steers the agent to
the right tool calls. Plain data and functions; protocol/content.py adapts them to the protocol."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kb_bridge import collection_tags
from kb_bridge.digits import id_number
from kb_bridge.errors import InvalidArgument
from kb_bridge.tools.arguments import LARGEST_ID
from kb_bridge.tools.validation import unstorable

# The largest id kb_related takes.
_MAX_CHUNK_ID = LARGEST_ID


@dataclass(frozen=True)
class Argument:
    name: str
    description: str
    required: bool = True


@dataclass(frozen=True)
class PromptSpec:
    name: str
    title: str
    description: str
    arguments: tuple[Argument, ...]
    build: Callable[[Mapping[str, str]], str]


def _find_insights(args: Mapping[str, str]) -> str:
    topic = args["topic"]
    return (
        f"Find what my knowledge base says about: {topic}\n\n"
        f"1. Call kb_search with 2-3 differently worded queries about {topic!r} (for example a plain phrasing, "
        "a more technical one, and one with likely keywords); use mode fts for exact names or codes.\n"
        "2. Merge the results by chunk_id and drop duplicates; read them and rank by how directly they answer.\n"
        "3. For the most relevant hits call kb_related with context=true to find connected material.\n"
        "4. Summarise the key insights, citing each as (title, document #id). Say plainly if nothing relevant was found."
    )


def _tag_exploration(args: Mapping[str, str]) -> str:
    tag = args["tag"]
    return (
        f"Explore everything tagged {tag!r}.\n\n"
        f"1. Call kb_list with tags=[{tag!r}] (follow next_cursor for more pages) to see the documents.\n"
        "2. Read the most recent or most relevant ones with kb_get.\n"
        "3. Describe the main themes, how the documents relate, and what seems missing or out of date."
    )


def _related_to_chunk(args: Mapping[str, str]) -> str:
    # The ids kb_related takes (arguments.DOCUMENT_ID), in ASCII digits: str.isdigit also takes 0, "²" and other
    # scripts' digits, and the prompt would steer the agent to a call that can only fail.
    number = id_number(args["chunk_id"].strip(), _MAX_CHUNK_ID)
    if number is None:
        raise InvalidArgument("chunk_id", f"must be a chunk id (a positive integer up to {_MAX_CHUNK_ID})")
    chunk_id = str(number)
    return (
        f"Find material related to chunk {chunk_id}.\n\n"
        f"1. Call kb_related with chunk_id={chunk_id} and context=true.\n"
        "2. Read the hits with their context; fetch whole documents with kb_get where needed.\n"
        f"3. Explain how each related piece connects to chunk {chunk_id}: agreement, contradiction, or extension."
    )


def _collection_overview(args: Mapping[str, str]) -> str:
    name = collection_tags.check_name(args["collection"])
    return (
        f"Give me an overview of the {name!r} collection.\n\n"
        f"1. Call kb_collections with name={name!r} for its size, document types and latest update.\n"
        f"2. Call kb_list with collection={name!r} to see the most recently updated documents.\n"
        "3. Summarise what the collection covers, what changed recently, and anything that looks stale or duplicated."
    )


def _remember(args: Mapping[str, str]) -> str:
    fact = args["fact"]
    name = collection_tags.check_name(args.get("collection") or "memory")
    return (
        f"Remember this in the {name!r} collection: {fact}\n\n"
        f"1. First call kb_search with collection={name!r} to see whether a note already covers it.\n"
        "2. If one does, update it with kb_update_note (pass its version as expected_version) instead of adding a duplicate.\n"
        f"3. Otherwise call kb_addnote with collection={name!r}, a short title, and wait=true, and confirm the document id."
    )


PROMPTS: tuple[PromptSpec, ...] = (
    PromptSpec("find_insights_about", "Find insights about a topic", "Search the knowledge base for insights about a topic, with query expansion",
               (Argument("topic", "what to look for"),), _find_insights),
    PromptSpec("tag_exploration", "Explore a tag", "Explore all content carrying a tag",
               (Argument("tag", "the tag to explore"),), _tag_exploration),
    PromptSpec("related_to_chunk", "Related to a chunk", "Find material related to one chunk",
               (Argument("chunk_id", "the chunk's id (from search results)"),), _related_to_chunk),
    PromptSpec("collection_overview", "Collection overview", "Summarise what a collection holds",
               (Argument("collection", "the collection's name"),), _collection_overview),
    PromptSpec("remember", "Remember a fact", "Save a fact to memory without creating duplicates",
               (Argument("fact", "what to remember"), Argument("collection", "where (default memory)", required=False)), _remember),
)


def find(name: str) -> PromptSpec | None:
    return next((p for p in PROMPTS if p.name == name), None)


def render(spec: PromptSpec, arguments: Mapping[str, str]) -> str:
    for argument in spec.arguments:
        value = arguments.get(argument.name)
        if argument.required and not (value and value.strip()):
            raise InvalidArgument(argument.name, "is required")
        if value is None:
            continue
        if len(value) > 2000:
            raise InvalidArgument(argument.name, "must be at most 2000 characters long")
        # The message steers the agent to tool calls carrying this value, which the tools refuse (and a lone
        # surrogate cannot even be encoded in the answer): refused here, naming the argument, as they do.
        problem = unstorable(value)
        if problem is not None:
            raise InvalidArgument(argument.name, problem)
    return spec.build(arguments)
