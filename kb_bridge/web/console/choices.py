"""The collections a form offers a principal: a limited token's own collections, else every collection
there is with `documents` (the default) among them; the form preselects `documents` when it may."""

from __future__ import annotations

from kb_bridge import collection_tags as collection_names
from kb_bridge.web.console.state import call, principal, usable


def collection_choices(*also: str) -> list[str]:
    """The names to offer (with `also`, e.g. `memory`, where the principal may write there)."""
    mine = principal().collections
    if mine is not None:
        return sorted(mine)
    names = [c["name"] for c in call("kb_collections", {})["collections"]] if usable("kb_collections") else []
    return sorted({collection_names.DEFAULT, *also, *names})


def preselected(names: list[str], wanted: str = collection_names.DEFAULT) -> str:
    return wanted if wanted in names else (names[0] if names else wanted)
