"""How many JSON values a body holds, counted on its bytes before anything parses it.

Parsed, each JSON value (an array, an object, a member of either) is a Python object of 30-60 bytes, so a body
of empty arrays within any byte limit can take hundreds of MiB to parse (3.7 MiB of them held a bridge worker
at 200 MiB; 30 MiB an engine worker at 795 MiB). The bridge's message door (protocol/envelope.py) and the
engine's JSON bodies (local_engine/api/validation.py) each refuse a body over their own count first.
"""

from __future__ import annotations

import re

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
