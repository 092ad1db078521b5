"""Whole numbers written in ASCII digits, read from text a client sent (a URI, a header, a form field).

str.isdigit alone is not enough: it also takes "²" (which int() then refuses: an internal error) and other
scripts' digits ("٣", which int() takes), and int() refuses more than 4,300 digits. Each caller bounds the
digits by the largest number it takes, so that int() is never asked for more.
"""

from __future__ import annotations


def ascii_number(text: str, most_digits: int) -> int | None:
    """`text` as a number when it is 1 to `most_digits` ASCII digits (leading zeros counted), else None."""
    if not (0 < len(text) <= most_digits and text.isascii() and text.isdigit()):
        return None
    return int(text)


def id_number(text: str, maximum: int) -> int | None:
    """`text` as an id, a number from 1 to `maximum` in ASCII digits (no more of them than `maximum` has), else
    None: the check a kb:// URI's id and a prompt's chunk id both make."""
    number = ascii_number(text, len(str(maximum)))
    return number if number is not None and 1 <= number <= maximum else None


def is_port(text: str) -> bool:
    """A TCP port as a Host or Origin, or an option, writes it: 1 to 5 ASCII digits, 1-65535."""
    port = ascii_number(text, 5)
    return port is not None and 0 < port <= 65535
