"""The cursors of document listings (kb_list, resources/list): opaque to agents, checked when they come back.

A cursor is unpadded base64url of a JSON object. Its first member says where the last page stopped:

    {"k": [updated_at, id]}   the last document returned (engine 3.14, GET /documents?after=): the next page
                              is what the listing holds after that key in its order, newest update first and
                              then the higher id. One key serves a token limited to several collections too:
                              every collection's listing is in that one order, so a merged walk has returned
                              exactly the documents at or before the key in each.
    {"o": offset}             from an engine without `after`: how many documents were returned so far
    {"m": {name: offset}}     the same per collection, for a token limited to several

beside `"f"`, the filters of the listing it continues (kb_list's, as the agent gave them; none for
resources/list and a kb_list without filters), which a call sending the cursor alone takes from it, and `"s"`, a
seal: the first 64 bits of the SHA-256 of the position and the filters. Without the seal an agent copying a
cursor with one character wrong went on from another place (105 of 3,024 one-character edits of a key cursor
decoded to another key), and the page silently left documents out or repeated some. The seal is no secret and
proves nothing about who wrote the cursor: a cursor grants nothing (every page is filtered to the caller's reach,
and the filters it carries are checked as the tool's own arguments are), so one forged with care only starts a
walk where its writer chose.

Anything else, a member of the wrong kind, or a seal that does not match, is INVALID_ARGUMENT naming the field,
before any engine call.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, TypeGuard

from kb_bridge.errors import InvalidArgument

# An engine's updated_at as the API answers it: UTC with `Z`, a four-digit year, ASCII digits, a fraction of
# up to microseconds (docs/engine-api.md, "Conventions"); the form the engine's `after` takes.
_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?Z")
_MAX_ID = 2**63 - 1
_MAX_OFFSET = 2**62  # the local engine's largest offset: no listing is that long, and past it the engine says 422
_NOT_OURS = "is not a cursor this server returned"


@dataclass(frozen=True)
class Key:
    """A document's place in a listing: (updated_at, id), newest first."""

    updated_at: str
    id: int

    def param(self) -> str:
        """The engine's `after` value."""
        return f"{self.updated_at},{self.id}"


Position = Key | int | dict[str, int]


class Cursor(NamedTuple):
    """A cursor as it came back: where the last page stopped, and the filters of its listing."""

    position: Position
    filters: dict[str, Any]


def key_of(document: Mapping[str, Any]) -> Key | None:
    """The listing key of an engine document; None when its fields are not what a key holds (an engine
    whose times look otherwise keeps offset cursors)."""
    updated, ident = document.get("updated_at"), document.get("id")
    if _is_time(updated) and _is_id(ident):
        return Key(updated, ident)
    return None


def encode(position: Position, filters: Mapping[str, Any]) -> str:
    """The cursor of `position` in the listing of these filters (as the caller gave them)."""
    kind, value = _member(position)
    data: dict[str, Any] = {kind: value}
    if filters:
        data["f"] = dict(filters)
    data["s"] = seal(kind, value, filters)
    return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode().rstrip("=")


def decode(cursor: str, field: str) -> Cursor:
    """Where a cursor says the last page stopped, and the filters of its listing; INVALID_ARGUMENT naming
    `field` for anything this module did not write (a cursor written before the seal included: the walk starts
    again)."""
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, TypeError):
        raise InvalidArgument(field, _NOT_OURS) from None
    if not isinstance(data, dict):
        raise InvalidArgument(field, _NOT_OURS)
    sent, filters = data.pop("s", None), data.pop("f", {})
    if not isinstance(sent, str) or not isinstance(filters, dict) or len(data) != 1:
        raise InvalidArgument(field, _NOT_OURS)
    kind, value = next(iter(data.items()))
    try:
        sealed = seal(kind, value, filters)
    except ValueError:  # a number no cursor of ours holds (NaN, Infinity)
        raise InvalidArgument(field, _NOT_OURS) from None
    if sent != sealed:
        raise InvalidArgument(field, _NOT_OURS + " (send it as it came)")
    return Cursor(_position(kind, value, field), filters)


def _member(position: Position) -> tuple[str, Any]:
    if isinstance(position, Key):
        return "k", [position.updated_at, position.id]
    if isinstance(position, int):
        return "o", position
    return "m", position


def _position(kind: str, value: Any, field: str) -> Position:
    if kind == "k" and isinstance(value, list) and len(value) == 2 and _is_time(value[0]) and _is_id(value[1]):
        return Key(value[0], value[1])
    if kind == "o" and _is_count(value):
        return int(value)
    if kind == "m" and isinstance(value, dict) and value and all(_is_count(v) for v in value.values()):
        return {str(name): int(offset) for name, offset in value.items()}
    raise InvalidArgument(field, _NOT_OURS)


def seal(kind: str, value: Any, filters: Mapping[str, Any]) -> str:
    """The seal of a position in the listing of these filters (the module docstring)."""
    text = json.dumps([kind, value, dict(filters)], sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def offsets_for(position: Position | None, names: Sequence[str], field: str) -> dict[str, int]:
    """The per-collection offsets a merged listing continues from (an offset cursor is one this token's
    merged listings wrote, naming exactly its collections)."""
    if position is None:
        return dict.fromkeys(names, 0)
    if not isinstance(position, dict) or set(position) != set(names):
        raise InvalidArgument(field, _NOT_OURS + " (for this token)")
    return dict(position)


def _is_time(value: object) -> TypeGuard[str]:
    if not isinstance(value, str) or not _TIME.fullmatch(value):
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:  # a day or hour that does not exist
        return False
    return True


def _is_id(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= _MAX_ID


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_OFFSET
