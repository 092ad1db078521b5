"""Argument completion (completion/complete) for prompts and resource templates: collection
names and tags, from the engine. Plain functions; protocol/content.py adapts them."""

from __future__ import annotations

from kb_bridge import collection_tags, shapes
from kb_bridge.auth.principal import Principal
from kb_bridge.client.engine import EngineClient

MAX_VALUES = 100

# (reference, argument) pairs whose values are collection names or tags. A reference is a
# prompt name or a resource template URI.
COLLECTION_ARGUMENTS = {("collection_overview", "collection"), ("remember", "collection"), ("kb://collection/{name}", "name")}
TAG_ARGUMENTS = {("tag_exploration", "tag"), ("kb://tag/{tag}", "tag")}


def _tag_names(engine: EngineClient, prefix: str | None) -> list[str]:
    raw = engine.list_tags(prefix=prefix)
    return [t["name"] for t in shapes.listed(raw, "tags") if isinstance(t, dict) and isinstance(t.get("name"), str)]


def complete(engine: EngineClient, principal: Principal, reference: str, argument: str, typed: str) -> tuple[list[str], int]:
    """(up to MAX_VALUES matching values, how many match in all); nothing for free-text arguments. A
    principal limited to some collections is offered only those, and no tags (the engine counts tags
    across every collection, so offering them would tell what the others hold)."""
    if (reference, argument) in COLLECTION_ARGUMENTS:
        names = [name[len(collection_tags.PREFIX) :] for name in _tag_names(engine, collection_tags.PREFIX)]
        candidates = [name for name in names if principal.sees(name)]
    elif (reference, argument) in TAG_ARGUMENTS and principal.limited:
        return [], 0
    elif (reference, argument) in TAG_ARGUMENTS:
        candidates = [name for name in _tag_names(engine, None) if not collection_tags.is_collection_tag(name)]
    else:
        return [], 0
    matches = sorted({c for c in candidates if c.lower().startswith(typed.lower())})
    return matches[:MAX_VALUES], len(matches)
