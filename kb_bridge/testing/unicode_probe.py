"""The Unicode character data that `tokenizers` (the Rust library) tokenises BERT text by, read off the library
itself, one code point at a time, and written as kb_bridge/local_engine/embedding/wordpiece_unicode.py.

Why not Python's unicodedata: `tokenizers` takes its categories from the unicode_categories crate (Unicode
8-era tables: U+08E2, a format character since Unicode 9, is kept; unassigned code points are not "other"),
its NFD from unicode-normalization-alignments (Unicode 12-era: U+11938 does not decompose) and its
lowercasing from Rust's standard library (Unicode 16 where Python 3.11 has 14). Python's own tables differ
from each of those in hundreds of code points and change with the Python version; the tokenizer must give the
ids the model was trained and tested with, on every Python. So the data is shipped, and
tests/engine/test_engine_wordpiece.py checks the shipped module against the installed `tokenizers`.

Regenerate (needs `tokenizers`, from the `test` extra):
    PYTHONPATH=. python -m kb_bridge.testing.unicode_probe kb_bridge/local_engine/embedding/wordpiece_unicode.py
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Iterable, Iterator
from pathlib import Path

HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3  # decomposed by formula (wordpiece.py), not listed
LIMIT = 0x110000
SURROGATES = range(0xD800, 0xE000)
# Stable marks of each combining class in Python's data, to compare a mark's class in the crate with.
REFERENCE_BEFORE = "\u0345"  # class 240, the highest: a mark of any other nonzero class moves before it


def code_points() -> Iterator[int]:
    return (cp for cp in range(LIMIT) if cp not in SURROGATES)


def ranges(points: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted code points as inclusive (first, last) runs."""
    runs: list[tuple[int, int]] = []
    for cp in sorted(points):
        if runs and runs[-1][1] == cp - 1:
            runs[-1] = (runs[-1][0], cp)
        else:
            runs.append((cp, cp))
    return runs


def derive() -> dict[str, object]:
    from tokenizers import normalizers, pre_tokenizers

    clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False,
                                       lowercase=False)
    strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True,
                                       lowercase=False)
    lower = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=False,
                                       lowercase=True)
    nfd = normalizers.NFD()
    pre = pre_tokenizers.BertPreTokenizer()
    removed, blanked, spaces, punctuation, marks = [], [], [], [], []
    decompositions: dict[int, str] = {}
    lowercase: dict[int, str] = {}
    for cp in code_points():
        char = chr(cp)
        cleaned = clean.normalize_str(char)
        if cleaned == "":
            removed.append(cp)
        elif cleaned == " " and char != " ":
            blanked.append(cp)
        pieces = [piece for piece, _ in pre.pre_tokenize_str(f"a{char}a")]
        if pieces == ["a", "a"]:
            spaces.append(cp)
        elif pieces == ["a", char, "a"]:
            punctuation.append(cp)
        decomposed = nfd.normalize_str(char)
        if decomposed != char and not HANGUL_FIRST <= cp <= HANGUL_LAST:
            decompositions[cp] = decomposed
        elif decomposed == char and strip.normalize_str(char) == "":
            marks.append(cp)
        lowered = lower.normalize_str(char)
        if lowered != char:
            lowercase[cp] = lowered
    return {"REMOVED": ranges(removed), "BLANKED": ranges(blanked), "SPACES": ranges(spaces),
            "PUNCTUATION": ranges(punctuation), "NONSPACING_MARKS": ranges(marks),
            "DECOMPOSITIONS": decompositions, "COMBINING_CLASSES": combining_classes(nfd),
            "LOWERCASE": lowercase}


def combining_classes(nfd: object) -> dict[int, int]:
    """Each mark's canonical combining class as the crate's NFD orders by it: Python's value (the class of an
    assigned character never changes), kept only where the crate's ordering shows it knows the mark, and
    checked to lie above the next lower class and below the next higher one."""
    normalize = nfd.normalize_str  # type: ignore[attr-defined]
    known: dict[int, int] = {}
    for cp in code_points():
        char = chr(cp)
        value = unicodedata.combining(char)
        if not value or normalize(char) != char:
            continue
        if value < 240:  # moves before a class-240 mark
            moves = normalize(REFERENCE_BEFORE + char) == char + REFERENCE_BEFORE
        else:  # a class-1 mark moves before it
            moves = normalize(char + "\u0334") == "\u0334" + char
        if moves:
            known[cp] = value
    reference: dict[int, str] = {}
    for cp, value in sorted(known.items()):
        reference.setdefault(value, chr(cp))
    values = sorted(reference)
    for cp, value in known.items():
        char = chr(cp)
        at = values.index(value)
        below = reference[values[at - 1]] if at else None
        above = reference[values[at + 1]] if at + 1 < len(values) else None
        if (normalize(char + reference[value]) != char + reference[value]
                or (above is not None and normalize(above + char) != char + above)
                or (below is not None and normalize(char + below) != below + char)):
            raise AssertionError(f"U+{cp:04X}: the crate's combining class is not Python's {value}")
    return known


def render(tables: dict[str, object]) -> str:
    lines = ['"""Unicode data as `tokenizers` (the Rust library) applies it to BERT text: GENERATED, do not edit.',
             "",
             "Written by kb_bridge/testing/unicode_probe.py from the behaviour of the installed `tokenizers` (it says",
             "why Python's unicodedata is not used), and checked against it by tests/engine/test_engine_wordpiece.py.",
             "Ranges are inclusive (first, last) code points; strings are written with escapes only.",
             '"""', "", "from __future__ import annotations", ""]
    for name in ("REMOVED", "BLANKED", "SPACES", "PUNCTUATION", "NONSPACING_MARKS"):
        runs = tables[name]
        assert isinstance(runs, list)
        lines.append(f"{name}: tuple[tuple[int, int], ...] = (")
        lines.extend(_wrapped([f"(0x{a:04X}, 0x{b:04X})," for a, b in runs]))
        lines.append(")")
    for name in ("DECOMPOSITIONS", "LOWERCASE"):
        mapping = tables[name]
        assert isinstance(mapping, dict)
        lines.append(f"{name}: dict[int, str] = {{")
        lines.extend(_wrapped([f"0x{cp:04X}: {_escaped(text)}," for cp, text in sorted(mapping.items())]))
        lines.append("}")
    classes = tables["COMBINING_CLASSES"]
    assert isinstance(classes, dict)
    lines.append("COMBINING_CLASSES: dict[int, int] = {")
    lines.extend(_wrapped([f"0x{cp:04X}: {value}," for cp, value in sorted(classes.items())]))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _escaped(text: str) -> str:
    return '"' + "".join(chr(cp) if 0x20 < (cp := ord(ch)) < 0x7F and ch not in '"\\' else
                         (f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}") for ch in text) + '"'


def _wrapped(items: list[str], width: int = 118) -> list[str]:
    lines: list[str] = []
    line = "   "
    for item in items:
        if len(line) + 1 + len(item) > width:
            lines.append(line)
            line = "   "
        line += " " + item
    if line.strip():
        lines.append(line)
    return lines


def main(argv: list[str]) -> None:
    Path(argv[1]).write_text(render(derive()), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv)
