"""Text in Unicode's compatibility normal form (NFKC) for the full-text index, and the way back to the text
as stored.

Two texts that read the same can be written with different characters: "ﬁle" with the ligature ﬁ (as PDF
text extraction often gives it) and "file"; "résumé" with é as one character (NFC, as most keyboards write
it) or as e and a combining accent (NFD, as macOS file names and some editors write it). The analyzer splits
words at anything not a letter or digit, so NFD's accents cut "résumé" in two, and the ligature is a letter
of its own: neither form found the other (docs/engine.md, "Search modes"). The index holds, and a query
searches, the NFKC form of each, in which they meet; the stored text is never changed (it is what the user
wrote, and what the contract returns).

Snippets mark words in the stored text, so a passage found in the normal form is mapped back to it:
`Folded` keeps, for stretches of the stored text, where each one's normal form begins.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import re
import sys
import unicodedata
from typing import Final

from .base import Passage

FORM: Final = "NFKC"
# Runs of ASCII and runs of anything else.
_RUNS = re.compile(r"[\x00-\x7f]+|[^\x00-\x7f]+")


def normal(text: str) -> str:
    """The text as the index holds it."""
    return unicodedata.normalize(FORM, text)


def is_normal(text: str) -> bool:
    """Whether the index holds the text as it is (nearly every text: a quick check, about 0.4 µs for 750
    characters)."""
    return unicodedata.is_normalized(FORM, text)


@dataclasses.dataclass(frozen=True)
class Folded:
    """A stored text's normal form, with the offsets that map its characters back to the stored text.

    The text is normalised in stretches that each begin at a character normalisation never joins to the one
    before it (ASCII, or a starter, combining class 0, that is not the second of any composition), so
    normalising the stretches one by one gives the text's normal form, and every character of it comes from
    exactly one stretch. A run of ASCII is one stretch, its own normal form, mapped character by character;
    every other stretch maps as a whole (a ligature's two letters to the ligature)."""

    text: str
    folded: str
    # Per stretch: where it starts in `text`, where its normal form starts in `folded` (both ascending), and
    # whether it is its own normal form (mapped character by character).
    starts: tuple[int, ...] = ()
    folded_starts: tuple[int, ...] = ()
    same: tuple[bool, ...] = ()

    @classmethod
    def of(cls, text: str) -> Folded:
        if is_normal(text):
            return cls(text, text)
        joined = _second_of_a_composition()
        starts: list[int] = []
        same: list[bool] = []
        for run in _RUNS.finditer(text):
            begin, end = run.span()
            if text[begin] < "\x80":
                # ASCII: one stretch, but its last letter may take the accents that follow (e + U+0301).
                follows = text[end] if end < len(text) else ""
                joins = bool(follows) and (unicodedata.combining(follows) != 0 or follows in joined)
                if end - joins > begin:
                    starts.append(begin)
                    same.append(True)
                if joins:
                    starts.append(end - 1)
                    same.append(False)
                continue
            for i in range(begin, end):
                char = text[i]
                if not starts or (unicodedata.combining(char) == 0 and char not in joined):
                    starts.append(i)
                    same.append(False)
        pieces = [normal(text[a:b]) for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]
        folded_starts, at = [], 0
        for piece in pieces:
            folded_starts.append(at)
            at += len(piece)
        return cls(text, "".join(pieces), tuple(starts), tuple(folded_starts), tuple(same))

    def passage_in_text(self, passage: Passage) -> Passage:
        """A passage of the normal form as the same stretch of the stored text, its highlights on the stored
        characters of each word."""
        start = self.start_in_text(passage.start)
        end = self.end_in_text(passage.start + len(passage.text))
        return Passage(text=self.text[start:end], start=start, highlights=tuple(
            (self.start_in_text(passage.start + a) - start, self.end_in_text(passage.start + b) - start)
            for a, b in passage.highlights))

    def start_in_text(self, offset: int) -> int:
        """Where, in the stored text, the character at `offset` of the normal form comes from."""
        if not self.starts:
            return offset
        if offset >= len(self.folded):
            return len(self.text)
        k = bisect.bisect_right(self.folded_starts, offset) - 1
        return self.starts[k] + (offset - self.folded_starts[k] if self.same[k] else 0)

    def end_in_text(self, offset: int) -> int:
        """Where, in the stored text, a stretch of the normal form ending (exclusive) at `offset` ends."""
        if not self.starts:
            return offset
        if offset <= 0:
            return 0
        k = bisect.bisect_right(self.folded_starts, offset - 1) - 1
        if self.same[k]:
            return self.starts[k] + offset - self.folded_starts[k]
        return self.starts[k + 1] if k + 1 < len(self.starts) else len(self.text)


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
