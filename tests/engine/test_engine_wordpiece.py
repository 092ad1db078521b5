"""embedding/wordpiece.py gives the ids the `tokenizers` library gives for the bundled tokenizer.json (the
reference, in the test extra), id for id: on real text (SciFact when it is beside the checkout, and every
paragraph of this repository), on hand-picked hard cases, on generated text, and character by character for
the Unicode data it ships; it refuses a tokenizer.json it does not implement, naming the field; and one
tokenizer serves many threads.
"""

from __future__ import annotations

import copy
import json
import threading
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kb_bridge.local_engine.embedding import wordpiece, wordpiece_unicode
from kb_bridge.local_engine.embedding.tokens import max_seq_length
from kb_bridge.local_engine.embedding.wordpiece import WordPieceTokenizer
from kb_bridge.testing.reference_model import reference_tokenizer

REPO = Path(__file__).resolve().parents[2]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"  # where bench/common.py looks for it
LIMIT = 0x110000

HARD_CASES = [
    "", " ", "   \t\n\r  ", "\u00a0\u2003\u3000", "\u200b\u200c\u200d\ufeff", "zero\u200bwidth\u200djoin",
    "Café naïve résumé Ångström façade", "e\u0301 a\u0308\u0304 o\u0327\u0301\u0300", "\u0345\u0301\u0334x",
    "İstanbul İİ ı I", "Straße STRASSE ß ẞ", "ΟΔΟΣ ΑΣ Σ σς", "ΆΈΉ ώ ᾯ ᾿ x\u1fefy",
    "中文字符 日本語のテキスト 한국어 텍스트 漢字かな混じり", "\U00020000\U0002a700\U0002f800 \uf900\ufaff",
    "emoji 😀🥰👍🏽 👨‍👩‍👧 🇫🇷", "العربية مع التشكيل: مُحَمَّد", "עִבְרִית", "हिन्दी भाषा", "ไทย ภาษา",
    "control \x00\x01\x07\x1b\x7f\x85\x9f chars\ufffd\x0b\x0c\x1c\x1d", "tab\there\nnewline\rreturn",
    "a" * 99, "a" * 100, "a" * 101, "é" * 100, "é" * 101, "Pneumonoultramicroscopicsilicovolcanoconiosis" * 3,
    "!!!???...,,,;;;:::---((([[[{{{}}}]]])))", "«quotes» “curly” ‘single’ — – … ¿¡", "@#$%^&*_+=|\\/<>~`",
    "[CLS] [SEP] [PAD] [UNK] [MASK]", "x[MASK]y[MASK][MASK]z", "[mask] [MASK [MASK]] [CL\u200bS]", "##ing ##",
    "ﬁ ﬂ ㎏ ① Ⅻ ｆｕｌｌｗｉｄｔｈ", "\U0001d400\U0001d41a math bold", "\u0130\u0307 K\u212a \u2126",
    "new letters \ua7cb\ua7dc \U00010d50 \U00016ea0 \u1c89", "\U000e0001\U000e0041 tags \U000f0000 private \ue000",
    "numbers 1,234.56 3.14e-10 10^9 1/2 ½ ²³", "code: def f(x): return x**2 # comment",
    "https://example.com/path?q=1&r=2#frag user@example.org",
    "a\x0bb a\x0cb a\x85b \x00 x\u200b.\u200by !\x00! 中\x00文 e\x00\u0301", "\x00\x0b\x85",
    "antidisestablishmentarianism" * 3 + " " + "ab" * 40,  # words past the cached length (64)
    "word " * 3000 + "[SEP] tail",  # beyond 8,192 characters: words found one at a time
    ("Ça été réglé. " * 400)[:9000] + "\x0b",
]


@pytest.fixture(scope="module")
def ours(model_dir: Path) -> WordPieceTokenizer:
    return WordPieceTokenizer.from_file(model_dir / "tokenizer.json", max_seq_length(model_dir))


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> Any:
    return reference_tokenizer(model_dir / "tokenizer.json", max_seq_length(model_dir))


def mismatches(ours: WordPieceTokenizer, reference: Any, texts: list[str]) -> list[tuple[str, list[int], list[int]]]:
    found = []
    for text in texts:
        expected, got = reference.encode(text).ids, ours.encode(text)
        if got != expected:
            found.append((text[:200], expected, got))
    return found[:5]


def repository_texts() -> list[str]:
    """Every paragraph of this repository's Python and Markdown files (code, prose, tables, non-ASCII), in
    a fixed order, and runs of 4,000 characters of them, which truncate."""
    paragraphs: list[str] = []
    files = sorted(path for folder in ("kb_bridge", "docs", "tests", "bench")
                   for path in (REPO / folder).rglob("*") if path.suffix in (".py", ".md"))
    for path in [REPO / "README.md", *files]:
        if path.name != "wordpiece_unicode.py":
            paragraphs += [part for part in path.read_text(encoding="utf-8").split("\n\n") if part.strip()]
    joined = "\n\n".join(paragraphs)
    return paragraphs + [joined[start : start + 4000] for start in range(0, min(len(joined), 2_000_000), 40_000)]


def test_the_model_truncates_at_its_max_seq_length(ours: WordPieceTokenizer, reference: Any, model_dir: Path) -> None:
    long = "The quick brown fox jumps over the lazy dog. " * 100
    ids = ours.encode(long)
    assert max_seq_length(model_dir) == 256 and len(ids) == 256 and ids == reference.encode(long).ids
    assert ids[0] == 101 and ids[-1] == 102  # [CLS] … [SEP] kept, the text cut
    assert ours.encode("") == [101, 102]


def test_ids_match_tokenizers_on_the_repository_texts(ours: WordPieceTokenizer, reference: Any) -> None:
    texts = repository_texts()
    assert len(texts) >= 2000
    assert sum(len(reference.encode(text).ids) == 256 for text in texts) >= 40  # truncation is exercised
    assert mismatches(ours, reference, texts) == []


def test_ids_match_tokenizers_on_every_scifact_document_and_claim(ours: WordPieceTokenizer, reference: Any) -> None:
    if not (SCIFACT / "corpus.jsonl").is_file():
        pytest.skip(f"SciFact is not at {SCIFACT} (the repository texts are compared without it)")
    with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as handle:
        texts = [f"{row['title']} {row['text']}".strip() for row in map(json.loads, handle)]
    with open(SCIFACT / "queries.jsonl", encoding="utf-8") as handle:
        texts += [row["text"] for row in map(json.loads, handle)]
    assert len(texts) > 6000
    assert mismatches(ours, reference, texts) == []


@pytest.mark.parametrize("text", HARD_CASES)
def test_ids_match_tokenizers_on_hard_cases(ours: WordPieceTokenizer, reference: Any, text: str) -> None:
    assert ours.encode(text) == reference.encode(text).ids


def test_rust_lowercasing_is_kept_where_python_differs(ours: WordPieceTokenizer, reference: Any) -> None:
    """str.lower() gives a final sigma (and knows the Unicode of its Python version); the ids follow Rust's
    char::to_lowercase, one character at a time, with the library's Unicode data."""
    assert "ΑΣ".lower() == "ας" and ours.encode("ΑΣ") == reference.encode("ΑΣ").ids == ours.encode("ασ")
    assert wordpiece_unicode.LOWERCASE[0x0130] == "i\u0307"  # İ: i and a combining dot, as Rust
    assert wordpiece_unicode.LOWERCASE[0xA7DC] == "\u019b"  # Unicode 16, which Python 3.11's str.lower lacks


VOCAB_WORDS = ["the", "un", "##aff", "##able", "[MASK]", "[CLS]", "##", "protein", "cells", "α", "β", "中", "é"]
PIECES = st.one_of(st.text(max_size=12), st.sampled_from(VOCAB_WORDS),
                   st.sampled_from(["\u0301", "\u0345", "\u0334", "\u1fef", "\u0130", "Σ", "\x00", "\ufffd", " ",
                                    "\u200b", "\u00a0", "-", "'", "\u3000", "\uac00", "\ud7a3", "\u0f73", "\u0344"]))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None,
          max_examples=400)
@given(text=st.text(max_size=200))
def test_ids_match_tokenizers_on_generated_text(ours: WordPieceTokenizer, reference: Any, text: str) -> None:
    assert ours.encode(text) == reference.encode(text).ids


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None,
          max_examples=400)
@given(pieces=st.lists(PIECES, max_size=40), joiner=st.sampled_from(["", " ", "\n"]))
def test_ids_match_tokenizers_on_generated_words_and_marks(ours: WordPieceTokenizer, reference: Any,
                                                          pieces: list[str], joiner: str) -> None:
    text = joiner.join(pieces)
    assert ours.encode(text) == reference.encode(text).ids


def blocks(size: int = 4096) -> Iterator[list[str]]:
    points = [chr(cp) for cp in range(LIMIT) if not 0xD800 <= cp < 0xE000]
    for start in range(0, len(points), size):
        yield points[start : start + size]


def test_the_shipped_unicode_data_is_what_tokenizers_does_for_every_code_point(reference: Any) -> None:
    """Each table against the library, every code point (in blocks: each step maps characters one by one,
    and 'a' between them keeps NFD from reordering across them)."""
    from tokenizers import normalizers, pre_tokenizers

    def bert(**flags: bool) -> Callable[[str], str]:
        options = {"clean_text": False, "handle_chinese_chars": False, "strip_accents": False, "lowercase": False}
        return normalizers.BertNormalizer(**{**options, **flags}).normalize_str  # type: ignore[no-any-return]

    unicode = wordpiece._unicode()
    # wordpiece.py cleans word by word: the characters clean_text drops must never split words.
    dropped = "".join(map(chr, expand(wordpiece_unicode.REMOVED)))
    assert wordpiece.splitters(True, True)[0].findall(f"a{dropped}a") == [f"a{dropped}a"]
    removed, blanked = (set(expand(wordpiece_unicode.REMOVED)), set(expand(wordpiece_unicode.BLANKED)))
    clean, strip, lower = bert(clean_text=True), bert(strip_accents=True), bert(lowercase=True)
    nfd, pre = normalizers.NFD().normalize_str, pre_tokenizers.BertPreTokenizer().pre_tokenize_str
    for chars in blocks():
        assert clean("".join(chars)) == "".join(
            "" if ord(c) in removed else " " if ord(c) in blanked else c for c in chars)
        assert lower("".join(chars)) == "".join(chars).translate(unicode.lowercase)
        spaced = "a".join(chars)
        assert nfd(spaced) == unicode.nfd(spaced)
        assert strip(spaced) == unicode.marks.sub("", unicode.nfd(spaced))
        assert [piece for piece, _ in pre(spaced)] == unicode.words.findall(spaced)


@pytest.mark.parametrize("clean_text", [True, False])
@pytest.mark.parametrize("chinese", [True, False])
def test_words_are_split_as_tokenizers_splits_them_for_every_code_point(
    reference: Any, clean_text: bool, chinese: bool
) -> None:
    """wordpiece.py's word patterns (the full one, and the ASCII one for ASCII text) against the library's
    cleaning and ideograph spacing followed by its pre-tokenizer; wordpiece.py cleans each word afterwards."""
    from tokenizers import normalizers, pre_tokenizers

    normalize = normalizers.BertNormalizer(clean_text=clean_text, handle_chinese_chars=chinese,
                                           strip_accents=False, lowercase=False).normalize_str
    pre = pre_tokenizers.BertPreTokenizer().pre_tokenize_str
    unicode = wordpiece._unicode()
    full, ascii_only = wordpiece.splitters(clean_text, chinese)

    def ours(pattern: Any, text: str) -> list[str]:
        words = pattern.findall(text)
        if clean_text:
            words = [word for word in (unicode.removed.sub("", word) for word in words) if word]
        return words

    ascii_texts = ["x".join(map(chr, range(128))), "".join(map(chr, range(128))), "ab1 2c\x0bd\x0c!e\x1ff"]
    for text in ascii_texts:
        assert [piece for piece, _ in pre(normalize(text))] == ours(ascii_only, text) == ours(full, text)
    for chars in blocks():
        for text in ("a".join(chars), "".join(chars)):
            assert [piece for piece, _ in pre(normalize(text))] == ours(full, text)


def test_marks_are_reordered_by_the_combining_classes_tokenizers_knows(reference: Any) -> None:
    """Every pair of marks with a combining class in Python's data, in both orders, through NFD: the
    library's order (by the classes its own, older, data has) is the one wordpiece.py makes."""
    from tokenizers import normalizers

    nfd, unicode = normalizers.NFD().normalize_str, wordpiece._unicode()
    marks = [chr(cp) for cp in range(LIMIT) if not 0xD800 <= cp < 0xE000 and unicodedata.combining(chr(cp))]
    one_per_class: dict[int, str] = {}
    for mark in marks:
        one_per_class.setdefault(unicodedata.combining(mark), mark)
    pairs = "".join(f"x{mark}{other}{mark}" for mark in marks for other in one_per_class.values())
    assert nfd(pairs) == unicode.nfd(pairs)


def expand(runs: tuple[tuple[int, int], ...]) -> Iterator[int]:
    for first, last in runs:
        yield from range(first, last + 1)


def changed(config: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(config)
    *parents, last = path.split(".")
    target: Any = changed
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return changed


@pytest.mark.parametrize(("path", "value", "named"), [
    ("normalizer.type", "Lowercase", "normalizer.type"),
    ("normalizer", None, "normalizer"),
    ("normalizer.unicode_form", "NFC", "normalizer.unicode_form"),
    ("normalizer.lowercase", "yes", "normalizer.lowercase"),
    ("normalizer.strip_accents", 1, "normalizer.strip_accents"),
    ("pre_tokenizer.type", "Whitespace", "pre_tokenizer.type"),
    ("model.type", "BPE", "model.type"),
    ("model.byte_fallback", True, "model.byte_fallback"),
    ("model.unk_token", "<unk>", "model.unk_token"),
    ("model.max_input_chars_per_word", "100", "model.max_input_chars_per_word"),
    ("post_processor.type", "BertProcessing", "post_processor.type"),
    ("post_processor.single.1", {"Sequence": {"id": "B", "type_id": 0}}, "post_processor.single[1]"),
    ("post_processor.single.0", {"SpecialToken": {"id": "<s>", "type_id": 0}}, "post_processor.single[0]"),
    ("added_tokens.4.lstrip", True, "added_tokens[4].lstrip"),
    ("added_tokens.0.normalized", True, "added_tokens[0].normalized"),
])
def test_a_tokenizer_json_it_does_not_implement_is_refused_naming_the_field(
    model_dir: Path, path: str, value: Any, named: str
) -> None:
    config = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    WordPieceTokenizer(config, 256)  # the file as shipped is accepted
    with pytest.raises(ValueError, match=named.replace(".", r"\.").replace("[", r"\[")):
        WordPieceTokenizer(changed(config, path, value), 256)


def test_max_length_must_leave_room_for_the_special_tokens(model_dir: Path) -> None:
    config = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    assert WordPieceTokenizer(config, 2).encode("hello world") == [101, 102]
    with pytest.raises(ValueError, match="max_length"):
        WordPieceTokenizer(config, 1)


def test_one_tokenizer_serves_many_threads_with_a_bounded_cache(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four threads encode the same texts through one tokenizer whose word cache holds 200 words (so it is
    emptied again and again while they run): each gets the ids one thread alone gets."""
    monkeypatch.setattr(wordpiece, "CACHE_WORDS", 200)
    texts = repository_texts()[:150]
    expected = [WordPieceTokenizer.from_file(model_dir / "tokenizer.json", 256).encode(text) for text in texts]
    shared = WordPieceTokenizer.from_file(model_dir / "tokenizer.json", 256)
    results: list[list[list[int]]] = [[] for _ in range(4)]

    def work(slot: int) -> None:
        results[slot] = [shared.encode(text) for text in texts]

    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert all(not thread.is_alive() for thread in threads)
    assert results == [expected] * 4
    assert 0 < len(shared._cache) <= 200
