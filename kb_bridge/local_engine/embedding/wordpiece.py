"""The model's tokenizer.json read in pure Python: BERT WordPiece, the ids `tokenizers` gives, id for id.

The `tokenizers` library (12 MB) requires huggingface_hub, which requires hf_xet, fsspec and filelock (35 MB
more), in the default install only to read this one file (issue 34: the install ≤ 300 MB). What the file
asks for is small: BertNormalizer, BertPreTokenizer, WordPiece and a [CLS] … [SEP] template. Everything
is read from the file, and anything else (another type, an option not implemented here) is refused with a
ValueError naming the field, so that another model cannot be tokenised wrongly without a word. tests/engine/test_engine_wordpiece.py
checks the ids against `tokenizers` itself (the `test` extra), on real and generated text.

How the Rust library does it, and how this does the same faster in Python:
- Added tokens ([CLS], [MASK], … written in the text) are cut out of the raw text first, longest first, as
  its AddedVocabulary does before normalising.
- clean_text drops NUL, U+FFFD and "other" characters (except tab, newline and return, which become spaces,
  as all whitespace does); handle_chinese_chars puts spaces around CJK ideographs; strip_accents is NFD then
  dropping non-spacing marks; lowercase maps each character alone (no final-sigma rule, unlike str.lower).
  The character data is the library's, not Python's: wordpiece_unicode.py says why.
- BertPreTokenizer splits on whitespace and isolates each punctuation character. Spaces around an ideograph
  isolate it just as well, so both happen in one regular expression over the raw text, and cleaning, accents
  and case are then taken off each word (its pieces split again on punctuation, which NFD can make: U+1FEF
  is a backquote). None of these steps crosses a space, a punctuation mark or an ideograph, so the words are
  the same as the library's; the dropped characters are none of those (except three spaces, U+000B, U+000C
  and U+0085, which clean_text drops rather than blanks: with it, they are not separators here either).
  So a word is normalised once, when first seen, and a text stops being read where truncation would cut it.
- WordPiece: greedy longest match first, "##" on continuing pieces, a word longer than
  max_input_chars_per_word or one that cannot be split is a single [UNK].
- Truncation is `enable_truncation(max_length=…)`'s (as sentence-transformers sets it): the first
  max_length minus the template's special tokens; the file's own truncation and padding are replaced, as
  tokens.py explains.
A word's ids are cached (a bounded dict: text repeats words), which is all of the state a tokenizer changes
after loading; the dict's single operations are atomic, so one tokenizer serves any number of threads.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from . import wordpiece_unicode as data

CACHE_WORDS = 50_000  # emptied when full: SciFact's 5,183 abstracts, whole, fill 44k entries, 7 MB
CACHE_WORD_CHARS = 64  # longer words are not cached, so a full cache is ~50 MB at worst whatever the text
WHOLE_TEXT_CHARS = 8192  # a longer text's words are found one at a time, and not past the truncation
HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3
CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
       (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))  # tokenizers' is_chinese_char

_NORMALIZER_KEYS = {"type", "clean_text", "handle_chinese_chars", "strip_accents", "lowercase"}
_MODEL_KEYS = {"type", "unk_token", "continuing_subword_prefix", "max_input_chars_per_word", "vocab"}
_PROCESSOR_KEYS = {"type", "single", "pair", "special_tokens"}
_EMPTY: Mapping[str, Any] = {}


def _char_class(runs: tuple[tuple[int, int], ...]) -> str:
    return "".join(f"\\U{first:08x}" if first == last else f"\\U{first:08x}-\\U{last:08x}" for first, last in runs)


class _Unicode:
    """The character data compiled into the forms used per text; built once per process, never changed."""

    def __init__(self) -> None:
        self.removed = re.compile(f"[{_char_class(data.REMOVED)}]")
        self.words = splitters(False, False)[0]  # for a word's cleaned, normalised form
        decompositions: dict[int, str] = dict(data.DECOMPOSITIONS)
        for cp in range(HANGUL_FIRST, HANGUL_LAST + 1):
            decompositions[cp] = _hangul(cp)
        self.decompositions = decompositions
        self.decomposable = re.compile(
            f"[{_char_class(tuple((cp, cp) for cp in sorted(data.DECOMPOSITIONS)))}"
            f"\\U{HANGUL_FIRST:08x}-\\U{HANGUL_LAST:08x}]")
        self.classes = data.COMBINING_CLASSES
        self.reorderable = re.compile(f"[{_char_class(tuple((cp, cp) for cp in sorted(self.classes)))}]{{2,}}")
        self.marks = re.compile(f"[{_char_class(data.NONSPACING_MARKS)}]+")
        self.lowercase = data.LOWERCASE

    def nfd(self, text: str) -> str:
        """Canonical decomposition: each character's full decomposition, then runs of marks in class order."""
        if self.decomposable.search(text):
            text = text.translate(self.decompositions)
        if self.reorderable.search(text):
            classes = self.classes
            text = self.reorderable.sub(lambda run: "".join(sorted(run[0], key=lambda c: classes[ord(c)])), text)
        return text


@functools.lru_cache(maxsize=None)
def splitters(clean_text: bool, chinese: bool) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(any text, ASCII text) patterns for a text's words: runs between whitespace, each punctuation mark (and,
    with handle_chinese_chars, ideograph) alone. With clean_text the characters it drops are not separators
    (it drops U+000B, a space to the splitter, and so joins the words around it): they stay inside words,
    and each word is cleaned when first seen."""
    spaces = data.SPACES
    if clean_text:
        spaces = tuple((cp, cp) for cp in _expanded(spaces)
                       if not any(first <= cp <= last for first, last in data.REMOVED))
    isolated = data.PUNCTUATION + (CJK if chinese else ())
    return _splitter(spaces, isolated), _splitter(_ascii(spaces), _ascii(isolated))


def _splitter(spaces: tuple[tuple[int, int], ...], isolated: tuple[tuple[int, int], ...]) -> re.Pattern[str]:
    """A pattern whose findall gives the words and isolated characters of a text.

    Written for the speed of `re`: a class holding characters beyond U+FFFF is looked up in a table for the
    rest and by a linear scan of its ranges beyond (~80 of them here) for EVERY character; so those ranges
    are checked only behind a one-range test for such a character, and a run of ASCII letters and digits
    followed by a separator is taken in one step (SciFact's chunks: 28 µs each against 116 with plain classes)."""
    astral = "\\U00010000-\\U0010ffff"
    near = _char_class(tuple((first, min(last, 0xFFFF)) for first, last in isolated if first <= 0xFFFF))
    far = _char_class(tuple((max(first, 0x10000), last) for first, last in isolated if last > 0xFFFF))
    blank = _char_class(spaces)
    if any(last > 0xFFFF for _, last in spaces):
        raise ValueError("whitespace beyond U+FFFF")  # none in Unicode; the pattern below relies on it
    far_isolated = f"|(?=[{astral}])[{far}]" if far else ""
    far_word = f"|(?=[{astral}])[^{far}]" if far else f"|[{astral}]"
    return re.compile(f"[0-9A-Za-z]+(?![^{blank}{near}])|[{near}]{far_isolated}"
                      f"|(?:[^{blank}{near}{astral}]+{far_word})+")


def _ascii(runs: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    return tuple((first, min(last, 0x7F)) for first, last in runs if first <= 0x7F)


def _expanded(runs: tuple[tuple[int, int], ...]) -> list[int]:
    return [cp for first, last in runs for cp in range(first, last + 1)]


def _hangul(cp: int) -> str:
    """A precomposed Hangul syllable's jamo (Unicode's arithmetic, as every NFD does)."""
    index = cp - HANGUL_FIRST
    lead, vowel, tail = 0x1100 + index // 588, 0x1161 + (index % 588) // 28, index % 28
    return chr(lead) + chr(vowel) + (chr(0x11A7 + tail) if tail else "")


@functools.lru_cache(maxsize=1)
def _unicode() -> _Unicode:
    return _Unicode()


class WordPieceTokenizer:
    """encode(text) → the ids `tokenizers` gives for tokenizer.json with truncation at `max_length`."""

    def __init__(self, config: Mapping[str, Any], max_length: int) -> None:
        self._unicode = _unicode()
        self._read_normalizer(_field(config, "normalizer", Mapping))
        pre_tokenizer = _field(config, "pre_tokenizer", Mapping)
        _refuse_other_keys(pre_tokenizer, {"type"}, "pre_tokenizer")
        if pre_tokenizer.get("type") != "BertPreTokenizer":
            raise ValueError(f"tokenizer.json: pre_tokenizer.type {pre_tokenizer.get('type')!r} is not implemented "
                             "(only BertPreTokenizer)")
        self._read_model(_field(config, "model", Mapping))
        self._read_added_tokens(_field(config, "added_tokens", list))
        self._read_post_processor(_field(config, "post_processor", Mapping))
        # config["truncation"] and config["padding"] are replaced, not read: see tokens.py.
        if not isinstance(max_length, int) or max_length < len(self._prefix) + len(self._suffix):
            raise ValueError(f"max_length {max_length!r} leaves no room for the template's special tokens")
        self._limit = max_length - len(self._prefix) - len(self._suffix)
        self._cache: dict[str, tuple[int, ...]] = {}

    @classmethod
    def from_file(cls, path: Path, max_length: int) -> WordPieceTokenizer:
        return cls(json.loads(path.read_text(encoding="utf-8")), max_length)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        if self._added is not None and self._added.search(text):
            position = 0
            for match in self._added.finditer(text):
                self._extend(ids, text[position : match.start()])
                ids.append(self._added_ids[match[0]])
                position = match.end()
            self._extend(ids, text[position:])
        else:
            self._extend(ids, text)
        return self._prefix + ids[: self._limit] + self._suffix

    def _extend(self, ids: list[int], text: str) -> None:
        """Append the ids of `text` (no added tokens in it), stopping once truncation would cut the rest."""
        limit = self._limit
        if len(ids) >= limit or not text:
            return
        cache, word_ids = self._cache, self._word_ids
        if len(text) > WHOLE_TEXT_CHARS:
            words: Iterable[str] = (match[0] for match in self._split_lazily(text))
        elif text.isascii():  # most text: a pattern of ASCII classes only is twice as fast
            words = self._split_ascii(text)
        else:
            words = self._split(text)
        for word in words:
            pieces = cache.get(word)
            if pieces is None:
                pieces = word_ids(word)
                if len(word) <= CACHE_WORD_CHARS:
                    if len(cache) >= CACHE_WORDS:
                        cache.clear()
                    cache[word] = pieces
            ids += pieces
            if len(ids) >= limit:
                return

    def _word_ids(self, word: str) -> tuple[int, ...]:
        normalized = self._normalize(word)
        if normalized == word:
            return self._wordpiece(word)
        ids: list[int] = []
        for piece in self._unicode.words.findall(normalized):
            ids += self._wordpiece(piece)
        return tuple(ids)

    def _normalize(self, word: str) -> str:
        if self._clean_text and self._unicode.removed.search(word):
            word = self._unicode.removed.sub("", word)
        if word.isascii():  # no accents; ASCII case is the same in Rust and Python
            return word.lower() if self._lowercase else word
        if self._strip_accents:
            word = self._unicode.marks.sub("", self._unicode.nfd(word))
        if self._lowercase:
            word = word.translate(self._unicode.lowercase)
        return word

    def _wordpiece(self, word: str) -> tuple[int, ...]:
        vocab = self._vocab
        if len(word) > self._max_chars:
            return (self._unk_id,)
        whole = vocab.get(word)
        if whole is not None:
            return (whole,)
        prefix, longest = self._prefix_text, self._longest
        ids: list[int] = []
        start, end_of_word = 0, len(word)
        while start < end_of_word:
            end = min(end_of_word, start + longest)
            while end > start:
                found = vocab.get(prefix + word[start:end] if start else word[start:end])
                if found is not None:
                    ids.append(found)
                    break
                end -= 1
            else:
                return (self._unk_id,)
            start = end
        return tuple(ids)

    def _read_normalizer(self, normalizer: Mapping[str, Any]) -> None:
        _refuse_other_keys(normalizer, _NORMALIZER_KEYS, "normalizer")
        if normalizer.get("type") != "BertNormalizer":
            raise ValueError(f"tokenizer.json: normalizer.type {normalizer.get('type')!r} is not implemented "
                             "(only BertNormalizer)")
        flags = {}
        for name in ("clean_text", "handle_chinese_chars", "lowercase"):
            flags[name] = _field(normalizer, name, bool, "normalizer.")
        strip_accents = normalizer.get("strip_accents")
        if strip_accents is not None and not isinstance(strip_accents, bool):
            raise ValueError(f"tokenizer.json: normalizer.strip_accents must be true, false or null, "
                             f"got {strip_accents!r}")
        self._clean_text = flags["clean_text"]
        self._lowercase = flags["lowercase"]
        self._strip_accents = flags["lowercase"] if strip_accents is None else strip_accents  # as bert.rs
        split, split_ascii = splitters(flags["clean_text"], flags["handle_chinese_chars"])
        self._split: Callable[[str], list[str]] = split.findall
        self._split_ascii: Callable[[str], list[str]] = split_ascii.findall
        self._split_lazily: Callable[[str], Iterator[re.Match[str]]] = split.finditer

    def _read_model(self, model: Mapping[str, Any]) -> None:
        _refuse_other_keys(model, _MODEL_KEYS, "model")
        if model.get("type") != "WordPiece":
            raise ValueError(f"tokenizer.json: model.type {model.get('type')!r} is not implemented (only WordPiece)")
        vocab = _field(model, "vocab", Mapping, "model.")
        if not all(isinstance(token, str) and isinstance(id_, int) for token, id_ in vocab.items()):
            raise ValueError("tokenizer.json: model.vocab must map token strings to integer ids")
        self._vocab: dict[str, int] = dict(vocab)
        unk = _field(model, "unk_token", str, "model.")
        if unk not in self._vocab:
            raise ValueError(f"tokenizer.json: model.unk_token {unk!r} is not in model.vocab")
        self._unk_id = self._vocab[unk]
        self._prefix_text = _field(model, "continuing_subword_prefix", str, "model.")
        self._max_chars = _field(model, "max_input_chars_per_word", int, "model.")
        # No vocabulary piece is longer than this, so longer candidates need no look-up.
        self._longest = max((len(token[len(self._prefix_text):]) if token.startswith(self._prefix_text)
                             and self._prefix_text else len(token) for token in self._vocab), default=1)

    def _read_added_tokens(self, added: list[Any]) -> None:
        self._added_ids: dict[str, int] = {}
        for index, token in enumerate(added):
            where = f"added_tokens[{index}]"
            if not isinstance(token, Mapping):
                raise ValueError(f"tokenizer.json: {where} must be an object")
            for option in ("single_word", "lstrip", "rstrip", "normalized"):
                if token.get(option, False) is not False:
                    raise ValueError(f"tokenizer.json: {where}.{option} = {token.get(option)!r} is not implemented "
                                     "(only false)")
            content, id_ = _field(token, "content", str, where + "."), _field(token, "id", int, where + ".")
            if content:
                self._added_ids[content] = id_
        # Longest first: at any position the longest added token wins, as the library's leftmost-longest match.
        self._added = (re.compile("|".join(re.escape(content) for content in sorted(self._added_ids, key=len,
                                                                                  reverse=True)))
                       if self._added_ids else None)

    def _read_post_processor(self, processor: Mapping[str, Any]) -> None:
        _refuse_other_keys(processor, _PROCESSOR_KEYS, "post_processor")
        if processor.get("type") != "TemplateProcessing":
            raise ValueError(f"tokenizer.json: post_processor.type {processor.get('type')!r} is not implemented "
                             "(only TemplateProcessing)")
        special = _field(processor, "special_tokens", Mapping, "post_processor.")
        pieces: tuple[list[int], list[int]] = ([], [])
        sequences = 0
        for index, piece in enumerate(_field(processor, "single", list, "post_processor.")):
            where = f"post_processor.single[{index}]"
            kind, body = "", _EMPTY
            if isinstance(piece, Mapping) and len(piece) == 1:
                kind, value = next(iter(piece.items()))
                body = value if isinstance(value, Mapping) else {}
            if kind == "Sequence" and body.get("id") == "A":
                sequences += 1
            elif kind == "SpecialToken":
                name = body.get("id")
                ids = special.get(name, {}).get("ids") if isinstance(special.get(name), Mapping) else None
                if not isinstance(ids, list) or not all(isinstance(id_, int) for id_ in ids):
                    raise ValueError(f"tokenizer.json: {where} names {name!r}, not in post_processor.special_tokens")
                pieces[min(sequences, 1)].extend(ids)
            else:
                raise ValueError(f"tokenizer.json: {where} = {piece!r} is not implemented "
                                 "(only SpecialToken and Sequence A)")
        if sequences != 1:
            raise ValueError("tokenizer.json: post_processor.single must hold Sequence A exactly once")
        self._prefix, self._suffix = pieces


def _field(mapping: Mapping[str, Any], name: str, kind: type, where: str = "") -> Any:
    value = mapping.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"tokenizer.json: {where}{name} must be {kind.__name__}, got {value!r}")
    return value


def _refuse_other_keys(mapping: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(mapping) - known)
    if unknown:
        raise ValueError(f"tokenizer.json: {where}.{unknown[0]} is not implemented")
