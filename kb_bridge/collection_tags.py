"""The `collection:<name>` tag convention, as pure functions.

A document belongs to exactly one collection, stored as the tag `collection:<name>`.
Agents never see that tag: results carry a `collection` field and the remaining tags.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from kb_bridge.errors import InvalidArgument

PREFIX = "collection:"
DEFAULT = "documents"
NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
NAME_RULE = "1-64 characters: lower-case letters a-z, digits, '.', '_' or '-', starting with a letter or digit (e.g. memory)"
_NAME_RE = re.compile(NAME_PATTERN)


def tag_for(name: str) -> str:
    """The engine tag that stores membership of `name`."""
    check_name(name)
    return PREFIX + name


def check_name(name: str, field: str = "collection") -> str:
    if not _NAME_RE.fullmatch(name):
        raise InvalidArgument(field, f"a collection name must be {NAME_RULE}")
    return name


def is_collection_tag(tag: str) -> bool:
    return tag.startswith(PREFIX)


TAG_MAX_LENGTH = 200
TAG_PATTERN = r"^[^\x00-\x1f\x7f]*$"  # no control characters
_TAG_RE = re.compile(TAG_PATTERN)


def check_tag(tag: str, field: str = "tag") -> str:
    """A tag as the tools' schemas take it (tools/arguments.py TAG): 1-200 characters, no control characters."""
    if not 1 <= len(tag) <= TAG_MAX_LENGTH or not _TAG_RE.fullmatch(tag):
        raise InvalidArgument(field, f"a tag must be 1-{TAG_MAX_LENGTH} characters without control characters")
    return tag


def check_user_tags(tags: Iterable[str], field: str = "tags") -> list[str]:
    """Tags an agent passes may not smuggle in a second collection."""
    result: list[str] = []
    for tag in tags:
        if is_collection_tag(tag):
            raise InvalidArgument(field, f"tags starting with {PREFIX!r} are reserved; use the collection argument")
        if tag not in result:
            result.append(tag)
    return result


def tags_with_collection(collection: str | None, tags: Sequence[str]) -> list[str]:
    """The engine tag list: the collection tag (when given) first, then the agent's tags."""
    user = check_user_tags(tags)
    return [tag_for(collection), *user] if collection is not None else user


def split(tags: Iterable[str]) -> tuple[str | None, list[str]]:
    """(collection, other tags) from an engine tag list.

    With no collection tag the collection is None; with several (written by another client,
    breaking the convention) the first wins and the rest are dropped from view.
    """
    collection: str | None = None
    rest: list[str] = []
    for tag in tags:
        if is_collection_tag(tag):
            if collection is None:
                collection = tag[len(PREFIX) :]
        else:
            rest.append(tag)
    return collection, rest


def collection_tags(tags: Iterable[str]) -> list[str]:
    """Every collection tag on a document (normally exactly one)."""
    return [tag for tag in tags if is_collection_tag(tag)]
