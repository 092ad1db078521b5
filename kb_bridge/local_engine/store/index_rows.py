"""The rows the derived text index is built from (text_index.ChunkRow), read the same way from both SQL stores:
one SELECT, to which each backend adds its own WHERE (its own placeholders), and one shaping of its rows with
their documents' tags, which each backend looks up with its own SQL."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .text_index import ChunkRow

SELECT = ("SELECT c.id, c.document_id, c.title, c.text, d.doc_type, d.created_at, d.updated_at "
          "FROM chunks c JOIN documents d ON d.id = c.document_id")


def with_tags(rows: Sequence[Sequence[Any]], tags_of: Callable[[set[int]], dict[int, list[str]]]) -> list[ChunkRow]:
    """SELECT's rows as ChunkRows; a chunk never updated takes its creation time as its update time."""
    tags = tags_of({int(row[1]) for row in rows})
    return [(int(r[0]), int(r[1]), str(r[2]), str(r[3]), str(r[4]), tags[int(r[1])], str(r[5]), str(r[6] or r[5]))
            for r in rows]
