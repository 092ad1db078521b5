"""Each search hit's `snippet` (3.11): the passage of its text that matched, with the matched words marked.

A hit whose text holds some of the query's words (as the full-text index stems them) gets the stretch of
about SNIPPET_CHARS characters where those words weigh most (tantivy's snippet generator, through the
store's `passages`), whichever signal found it. A hit whose text holds none of them (found by meaning
alone, or by its title's words) gets its opening sentence, unmarked: with no word in common, the sentence
nearest in meaning would need the model over every sentence of every such hit, a pass per search on the
thread that embeds queries, while the opening sentence says what the chunk is about for free.

Only the returned hits get one, so the cost grows with top_n, not with the index.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..store.base import JSON, Passage, Store

SNIPPET_CHARS = 240
_SENTENCE_END = re.compile(r"(?<=[.!?])\s|\n\s*\n")


def snippets(store: Store, query: str, texts: Sequence[str]) -> list[JSON]:
    """The snippet of each text for this query, in order."""
    passages = store.passages(query, texts, SNIPPET_CHARS)
    return [_as_json(passage) if passage is not None else _as_json(opening_sentence(text))
            for passage, text in zip(passages, texts, strict=True)]


def opening_sentence(text: str, max_chars: int = SNIPPET_CHARS) -> Passage:
    """The text's first sentence (to a full stop, ! or ? before a space, or a blank line), at most
    `max_chars` characters, cut at a space where it is longer."""
    start = len(text) - len(text.lstrip())
    ended = _SENTENCE_END.search(text, start)
    end = min(ended.start() if ended else len(text), start + max_chars)
    if end < len(text) and not text[end].isspace():
        space = text.rfind(" ", start, end)
        end = space if space > start else end
    return Passage(text=text[start:end].rstrip(), start=start, highlights=())


def _as_json(passage: Passage) -> JSON:
    return {"text": passage.text, "start": passage.start, "highlights": [list(pair) for pair in passage.highlights]}
