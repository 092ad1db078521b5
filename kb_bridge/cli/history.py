"""A note's history in an export (`kb-bridge export --history`) and back (`kb-bridge import`): the earlier
versions the engine keeps (docs/engine-api.md, "Version"), each with its number, title, text, tags (the
engine's, collection tag included), updated_at and changed_by. Import hands them to the new document in
one idempotent PUT once its job is done, so numbers, times and authors come back as they were."""

from __future__ import annotations

from typing import Any

from kb_bridge.client.engine import EngineClient
from kb_bridge.errors import EngineUnsupported, InvalidArgument, NotFound

FIELDS = ("version", "title", "text", "tags", "updated_at", "changed_by")


def earlier_versions(client: EngineClient, document_id: int) -> list[dict[str, Any]]:
    """The note's earlier versions with their texts, oldest first ([] from an engine before 3.9)."""
    try:
        listed = client.list_versions(document_id).get("versions")
    except (NotFound, EngineUnsupported):
        return []
    numbers = sorted(v["version"] for v in listed or [] if isinstance(v, dict) and not v.get("current")
                     and isinstance(v.get("version"), int))
    found = []
    for number in numbers:
        try:
            raw = client.get_version(document_id, number)
        except NotFound:
            continue  # pruned while the export ran
        found.append({**{key: raw.get(key) for key in FIELDS}, "text": raw.get("content")})
    return found


def check_history(raw: Any) -> tuple[dict[str, Any], ...]:
    """A record's `history`, checked for shape (the engine checks each field): a list of objects."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(item, dict) for item in raw):
        raise InvalidArgument("history", "must be a list of objects (a note's earlier versions)")
    return tuple({key: item.get(key) for key in FIELDS} for item in raw)


def restore(client: EngineClient, document_id: int, history: tuple[dict[str, Any], ...]) -> None:
    if history:
        client.restore_versions(document_id, history)
