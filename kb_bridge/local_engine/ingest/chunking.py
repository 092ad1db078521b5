"""Text into chunks: heading-aware for Markdown, size-bounded with overlap for prose.

A chunk is what gets embedded and ranked, so it should hold one topic and fit the model's window
(all-MiniLM-L6-v2 reads 256 word pieces, roughly 1000 characters of English). Markdown is first cut at its
headings; sections that fit are packed together, longer ones are split like prose, and every continuation
starts with its section's heading so that it still says what it is about. Prose is split at paragraph,
then sentence, then word boundaries, and consecutive chunks overlap so that a sentence cut at a boundary is
still found whole in one of them.

Text is walked, never split into lists up front: a list holds an object of some fifty bytes per line,
paragraph or sentence, so 20 MB of "# a" lines took 1.9 GiB to chunk, and "a" paragraphs 1 GiB. Sections and
pieces are produced one at a time; memory holds the text, its chunks, and the chunk being built.

The model reads each chunk with its document's title in front (`embedding_input`): a chunk cut from the middle
of a document often does not say what it is about, and the title does. On SciFact (abstracts of about 1400
characters, two chunks each) this raised vector nDCG@10 from 0.674 to 0.680 and let the second chunk of an
abstract be found for its topic (docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from itertools import pairwise

# Formats whose text carries Markdown headings: Markdown itself, notes (agents write Markdown), and the
# DOCX/HTML parsers, which render headings as Markdown.
MARKDOWN_TYPES = frozenset({"md", "note", "docx", "html"})

_HEADING = re.compile(r"^(#{1,6})[ \t]+\S")
_FENCE = re.compile(r"^\s*(```|~~~)")
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
_BLANK_LINES = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)*")
# normalise() strips lines this many characters at a time, so that its list of lines stays small.
_NORMALISE_BLOCK = 64 * 1024


# A title longer than this is cut before it goes in front of a chunk, so that it never takes much of the
# model's 256-word-piece window from the chunk itself.
EMBEDDING_TITLE_CHARS = 200
# Stored with the vectors (meta `embedding_model`): vectors made from another kind of input are remade.
EMBEDDING_INPUT = "title+chunk"


@dataclasses.dataclass(frozen=True)
class ChunkingPolicy:
    max_chars: int = 1000
    overlap: int = 150


@dataclasses.dataclass(frozen=True)
class _Piece:
    """A unit of text no longer than max_chars, and the paragraph it came from (to choose the joiner)."""

    text: str
    paragraph: int


def normalise(text: str) -> str:
    """Unix newlines, no NULs or trailing spaces, at most one blank line in a row."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    text = _strip_lines(text)
    return _BLANK_LINES.sub("\n\n", text).strip()


def _strip_lines(text: str) -> str:
    """Each line's rstrip(), a block of lines at a time (one list of all lines cost fifty bytes a line)."""
    blocks: list[str] = []
    start, end = 0, len(text)
    while True:
        stop = text.find("\n", min(start + _NORMALISE_BLOCK, end))
        stop = end if stop == -1 else stop
        blocks.append("\n".join(line.rstrip() for line in text[start:stop].split("\n")))
        if stop == end:
            return "\n".join(blocks)
        start = stop + 1


def embedding_input(title: str, chunk: str) -> str:
    """What the embedding model reads for a chunk: the title, a blank line, the chunk.

    The title is left out when the chunk already begins with it (a note titled by its first line).
    """
    title = " ".join(title.split())[:EMBEDDING_TITLE_CHARS]
    if not title or chunk.lstrip("# \t").startswith(title.lstrip("# \t").rstrip("…")):
        return chunk
    return f"{title}\n\n{chunk}"


def chunk_text(text: str, doc_type: str, policy: ChunkingPolicy) -> list[str]:
    text = normalise(text)
    if not text:
        return []
    if doc_type in MARKDOWN_TYPES:
        return _chunk_markdown(text, policy)
    return _chunk_prose(text, policy)


def _chunk_markdown(text: str, policy: ChunkingPolicy) -> list[str]:
    chunks: list[str] = []
    packed = ""
    for heading, section in _sections(text):
        if packed and len(packed) + 2 + len(section) <= policy.max_chars:
            packed = f"{packed}\n\n{section}"
            continue
        if packed:
            chunks.append(packed)
            packed = ""
        if len(section) <= policy.max_chars:
            packed = section
            continue
        chunks.extend(_split_section(heading, section, policy))
    if packed:
        chunks.append(packed)
    return chunks


def _sections(text: str) -> Iterator[tuple[str, str]]:
    """(heading line, section text including that line), the empty ones left out; text before the first
    heading has heading ''."""
    heading, begin, in_fence = "", 0, False
    for start, line in _lines(text):
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and _HEADING.match(line):
            body = text[begin:start].strip()
            if body:
                yield heading, body
            heading, begin = line.strip(), start
    body = text[begin:].strip()
    if body:
        yield heading, body


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(offset, line) of each line, as text.split("\n") gives them."""
    start = 0
    while True:
        end = text.find("\n", start)
        if end == -1:
            yield start, text[start:]
            return
        yield start, text[start:end]
        start = end + 1


def _between(text: str, separator: re.Pattern[str] | str) -> Iterator[str]:
    """The parts of text between separators, as text.split(separator) (or the pattern's split) gives them."""
    start = 0
    if isinstance(separator, str):
        while (end := text.find(separator, start)) != -1:
            yield text[start:end]
            start = end + len(separator)
    else:
        for match in separator.finditer(text):
            yield text[start : match.start()]
            start = match.end()
    yield text[start:]


def _split_section(heading: str, section: str, policy: ChunkingPolicy) -> list[str]:
    if not heading:
        return _chunk_prose(section, policy)
    body = section[len(heading):].strip()
    # Leave room for the heading that prefixes every piece; a heading longer than half a chunk is cut.
    prefix = heading[: policy.max_chars // 2]
    room = max(policy.max_chars - len(prefix) - 2, policy.max_chars // 2)
    inner = ChunkingPolicy(max_chars=room, overlap=min(policy.overlap, room // 3))
    return [f"{prefix}\n\n{piece}" for piece in _chunk_prose(body, inner)]


def _chunk_prose(text: str, policy: ChunkingPolicy) -> list[str]:
    pieces = _pieces(text, policy.max_chars)
    chunks: list[str] = []
    current: list[_Piece] = []
    length = 0
    for piece in pieces:
        added = len(piece.text) + (2 if current else 0)
        if current and length + added > policy.max_chars:
            chunks.append(_join(current))
            current = _overlap_tail(current, policy.overlap)
            length = len(_join(current)) if current else 0
            added = len(piece.text) + (2 if current else 0)
            if current and length + added > policy.max_chars:
                current, length = [], 0
                added = len(piece.text)
        current.append(piece)
        length += added
    if current:
        chunks.append(_join(current))
    return chunks


def _pieces(text: str, max_chars: int) -> Iterator[_Piece]:
    """Paragraphs, or their sentences when a paragraph is too long, or words when a sentence is."""
    for number, paragraph in enumerate(p.strip() for p in _between(text, "\n\n")):
        if not paragraph:
            continue
        if len(paragraph) <= max_chars:
            yield _Piece(paragraph, number)
            continue
        for sentence in _between(paragraph, _SENTENCE_END):
            for part in _hard_split(sentence.strip(), max_chars):
                yield _Piece(part, number)


def _hard_split(text: str, max_chars: int) -> list[str]:
    """Cut text longer than max_chars at the last whitespace before the limit (or at the limit).

    Walks the text with an offset: copying the remainder after every cut made chunking quadratic in the
    length of a text without break points (32 MB took 50 times as long as 4 MB).
    """
    parts = []
    start, end = 0, len(text)
    while end - start > max_chars:
        cut = text.rfind(" ", start + max_chars // 2, start + max_chars + 1)
        if cut == -1:
            cut = start + max_chars
        part = text[start:cut].strip()
        if part:
            parts.append(part)
        start = cut
        while start < end and text[start].isspace():
            start += 1
    if start < end:
        parts.append(text[start:end].strip())
    return parts


def _join(pieces: list[_Piece]) -> str:
    out = pieces[0].text
    for previous, piece in pairwise(pieces):
        out += (" " if piece.paragraph == previous.paragraph else "\n\n") + piece.text
    return out


def _overlap_tail(pieces: list[_Piece], overlap: int) -> list[_Piece]:
    """The last pieces of a chunk, up to `overlap` characters, to start the next chunk with."""
    if overlap <= 0:
        return []
    tail: list[_Piece] = []
    length = 0
    for piece in reversed(pieces):
        if length + len(piece.text) > overlap:
            break
        tail.insert(0, piece)
        length += len(piece.text) + 1
    if not tail:
        last = pieces[-1]
        cut = last.text.find(" ", len(last.text) - overlap)
        if cut == -1:
            return []
        return [_Piece(last.text[cut + 1 :], last.paragraph)]
    return tail
