"""JSON bodies as both programs check them: how many values a body holds, counted on its bytes before anything
parses it; every string of a parsed body, with the keys that lead to it.

Parsed, each JSON value (an array, an object, a member of either) is a Python object of 30-60 bytes, so a body
of empty arrays within any byte limit can take hundreds of MiB to parse (3.7 MiB of them held a bridge worker
at 200 MiB; 30 MiB an engine worker at 795 MiB). The bridge's message door (protocol/envelope.py) and the
engine's JSON bodies (local_engine/api/validation.py) each refuse a body over their own count first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

# A JSON string (closed), or a character that starts a value or follows one outside strings. Possessive: the
# backtracking form kept a state per escape (4 MiB of `\"` in one string held 285 MiB in the regex engine).
_STRING_OR_VALUE = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"|[,\[{]')


def more_than(body: bytes, limit: int) -> bool:
    """Whether `body` holds more than `limit` values, counted as commas, `[` and `{` outside strings (never
    fewer than it parses to, whatever it is); reads no further than the count needs."""
    if body.count(b",") + body.count(b"[") + body.count(b"{") <= limit:
        return False  # the characters inside strings only add to this count
    count = 0
    for match in _STRING_OR_VALUE.finditer(body):
        if match.end() - match.start() == 1:  # a string is at least its two quotes
            count += 1
            if count > limit:
                return True
    return False


def strings(value: Any) -> Iterator[tuple[list[Any], str, bool]]:
    """Every string in a parsed JSON value, depth first, as (keys, text, is_key): `keys` leads from the top to
    the string (an object's key, a list's index), the key itself last when `is_key`. Both programs check every
    string of a body this way before anything stores it (tools/validation.py, local_engine/api/validation.py).

    `keys` is the walk's own list, changed as it goes on: a caller that keeps it copies it. A stack of the
    containers being walked, not recursion (bodies may nest deeper than the interpreter's stack), and no copy per
    value: naming each value as it was queued held a string and a tuple per value (3 million empty arrays, 8.6 MiB
    of JSON, took 830 MiB)."""
    keys: list[Any] = []
    stack: list[Iterator[tuple[Any, Any]]] = [iter(((None, value),))]
    while stack:
        for key, item in stack[-1]:
            if len(stack) > 1:
                keys.append(key)
            if isinstance(key, str):
                yield keys, key, True
            if isinstance(item, str):
                yield keys, item, False
            elif isinstance(item, dict) and item:
                stack.append(iter(item.items()))
                break
            elif isinstance(item, list) and item:
                stack.append(enumerate(item))
                break
            if len(stack) > 1:
                keys.pop()
        else:
            stack.pop()
            if len(stack) > 1:
                keys.pop()  # the key of the container just finished


def path(keys: Iterable[Any]) -> str:
    """Keys as errors name the value they lead to: `tags[1]`, `versions[0].title`."""
    out = ""
    for key in keys:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out
