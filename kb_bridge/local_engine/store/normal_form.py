"""Text in Unicode's compatibility normal form (NFKC) for the full-text index, and the way back to the text
as stored.

Two texts that read the same can be written with different characters: "ﬁle" with the ligature ﬁ (as PDF
text extraction often gives it) and "file"; "résumé" with é as one character (NFC, as most keyboards write
it) or as e and a combining accent (NFD, as macOS file names and some editors write it). The analyzer splits
words at anything not a letter or digit, so NFD's accents cut "résumé" in two, and the ligature is a letter
of its own: neither form found the other (docs/engine.md, "Full text"). The index holds, and a query
searches, the NFKC form of each, in which they meet; the stored text is never changed (it is what the user
wrote, and what the contract returns).

Snippets mark words in the stored text, so a passage found in the normal form is mapped back to it:
`Folded` keeps, for stretches of the stored text, where each one's normal form begins.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import sys
import unicodedata
from typing import Final

FORM: Final = "NFKC"


def normal(text: str) -> str:
    """The text as the index holds it."""
    return unicodedata.normalize(FORM, text)


@dataclasses.dataclass(frozen=True)
class Folded:
    """A stored text's normal form, with the offsets that map its characters back to the stored text.

    The text is normalised in stretches that each begin at a character normalisation never joins to the one
    before it (a starter, combining class 0, that is not the second of any composition), so normalising the
    stretches one by one gives the text's normal form, and every character of it comes from exactly one
    stretch."""

    text: str
    folded: str
    # Per stretch: where it starts in `text` and where its normal form starts in `folded` (both ascending).
    starts: tuple[int, ...]
    folded_starts: tuple[int, ...]

    @classmethod
    def of(cls, text: str) -> Folded:
        if unicodedata.is_normalized(FORM, text):
            return cls(text, text, (), ())
        joined = _second_of_a_composition()
        starts = [i for i, char in enumerate(text) if i == 0 or (unicodedata.combining(char) == 0 and char not in joined)]
        pieces = [normal(text[start:end]) for start, end in zip(starts, [*starts[1:], len(text)], strict=True)]
        folded_starts, at = [], 0
        for piece in pieces:
            folded_starts.append(at)
            at += len(piece)
        return cls(text, "".join(pieces), tuple(starts), tuple(folded_starts))

    def start_in_text(self, offset: int) -> int:
        """Where, in the stored text, the character at `offset` of the normal form comes from."""
        if not self.starts:
            return offset
        if offset >= len(self.folded):
            return len(self.text)
        return self.starts[bisect.bisect_right(self.folded_starts, offset) - 1]

    def end_in_text(self, offset: int) -> int:
        """Where, in the stored text, a stretch of the normal form ending (exclusive) at `offset` ends."""
        if not self.starts:
            return offset
        if offset <= 0:
            return 0
        run = bisect.bisect_right(self.folded_starts, offset - 1) - 1
        return self.starts[run + 1] if run + 1 < len(self.starts) else len(self.text)


@functools.cache
def _second_of_a_composition() -> frozenset[str]:
    """The starters that composition can join to the character before them: the second of a two-character
    canonical decomposition (vowel signs of several Indic scripts), and Hangul's medial and final jamo, which
    compose into syllables by rule. Read once from the Unicode database (about 0.2 s)."""
    found = {chr(c) for c in range(0x1160, 0x1200)}  # Hangul jungseong and jongseong
    for code in range(sys.maxunicode + 1):
        parts = unicodedata.decomposition(chr(code)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            second = chr(int(parts[1], 16))
            if unicodedata.combining(second) == 0:
                found.add(second)
    return frozenset(found)
