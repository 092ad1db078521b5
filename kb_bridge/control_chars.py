"""Text from outside (stored notes, file names, a client's headers, a parser's words about a file) made safe to
write where a control character would act: a terminal runs the escape sequences ESC and the C1 characters start
(set the title, write the clipboard with OSC 52, erase the screen; U+009B is a terminal's CSI), and a newline in a
line-oriented log or a one-line error starts a line of its own."""

from __future__ import annotations

import functools
import re


def escaped(text: str, keep: str = "") -> str:
    """`text` with each C0 and C1 control character and DEL, but those in `keep` ("\\t", "\\t\\n"), written as
    `\\xNN`."""
    return _pattern(keep).sub(_escape, text)


@functools.cache
def _pattern(keep: str) -> re.Pattern[str]:
    controls = "".join(chr(code) for code in (*range(0x20), *range(0x7F, 0xA0)) if chr(code) not in keep)
    return re.compile(f"[{re.escape(controls)}]")


def _escape(found: re.Match[str]) -> str:
    return f"\\x{ord(found.group()):02x}"
