"""Secrets out of text that leaves the process: no piece of 8 or more characters of a secret (the engine key,
the MCP tokens, the metrics token), in any letter case, reaches a tool result or a log line.

A `Redactor` knows every 8-character piece of every secret, lower-cased. It finds runs of characters
that secrets are made of, and within them every window that is such a piece; each covered stretch
becomes `***`. Redaction runs before any truncation, so a cut can never leave a stub of a secret behind
(a message cut in the middle of a key still shows none of it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

PIECE = 8
MASK = "***"


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = [s.lower() for s in secrets if s]
        self._pieces = {value[i : i + PIECE] for value in values if len(value) >= PIECE for i in range(len(value) - PIECE + 1)}
        self._short = [value for value in values if len(value) < PIECE]
        alphabet = {c for value in values for c in value}
        alphabet |= {c.upper() for c in alphabet}
        length = min((len(v) for v in values), default=PIECE)
        self._runs = re.compile(f"[{re.escape(''.join(sorted(alphabet)))}]{{{min(length, PIECE)},}}") if alphabet else None

    def __bool__(self) -> bool:
        return self._runs is not None

    def __call__(self, text: str) -> str:
        if self._runs is None or not text:
            return text
        covered = bytearray(len(text))
        found = False
        for run in self._runs.finditer(text):
            low = run.group().lower()
            start = run.start()
            for i in range(len(low) - PIECE + 1):
                if low[i : i + PIECE] in self._pieces:
                    covered[start + i : start + i + PIECE] = b"\x01" * PIECE
                    found = True
            for short in self._short:
                at = low.find(short)
                while at != -1:
                    covered[start + at : start + at + len(short)] = b"\x01" * len(short)
                    found = True
                    at = low.find(short, at + 1)
        if not found:
            return text
        out: list[str] = []
        i = 0
        while i < len(text):
            if covered[i]:
                while i < len(text) and covered[i]:
                    i += 1
                out.append(MASK)
            else:
                j = covered.find(1, i)
                j = len(text) if j == -1 else j
                out.append(text[i:j])
                i = j
        return "".join(out)


NO_SECRETS = Redactor()
