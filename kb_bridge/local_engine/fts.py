"""Full-text search: BM25 over the FTS5 index of chunk titles and texts.

User queries never reach FTS5 as syntax. They are cut into word tokens, each token is quoted, and the
tokens are OR-ed: a natural-language question then ranks by BM25 like a search engine does, instead of
requiring every word (AND) or failing on `"`, `*`, `:`, `(`, `-` or `NEAR`. A query with no word in it
matches nothing rather than raising an error.
"""

from __future__ import annotations

import re
import sqlite3

from .documents import DocumentFilter

_TOKEN = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 32

# Function words that match nearly every chunk: they cost time and add nothing to BM25's ranking.
# Dropped only when the query has other words ("to be or not to be" still searches for itself).
STOPWORDS = frozenset(
    """a about an and are as at be by can could did do does for from had has have how i if in into is it its
    me my no not of on or our she should so than that the their them then there these they this to was we
    were what when where which who why will with would you your""".split()
)


def match_expression(query: str) -> str | None:
    """The FTS5 MATCH expression for a user query, or None when it has no searchable word."""
    tokens = list(dict.fromkeys(token.lower() for token in _TOKEN.findall(query)))
    words = [token for token in tokens if token not in STOPWORDS] or tokens
    if not words:
        return None
    return " OR ".join(f'"{word}"' for word in words[:MAX_TERMS])


def search(
    conn: sqlite3.Connection,
    query: str,
    where: DocumentFilter,
    limit: int,
    title_weight: float,
    text_weight: float,
) -> list[tuple[int, float]]:
    """(chunk_id, score) best first; score is -BM25, so higher is better. Filters apply before the limit."""
    expression = match_expression(query)
    if expression is None or limit <= 0:
        return []
    # bm25() weights must be literals; they are floats from our own config, formatted here.
    bm25 = f"bm25(chunks_fts, {float(title_weight)!r}, {float(text_weight)!r})"
    if where.is_empty():
        sql = f"SELECT rowid, {bm25} AS s FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY s LIMIT ?"
        params: list[object] = [expression, limit]
    else:
        clause, filter_params = where.sql("d")
        sql = (
            f"SELECT f.rowid, {bm25} AS s FROM chunks_fts f JOIN chunks c ON c.id = f.rowid "
            f"JOIN documents d ON d.id = c.document_id WHERE chunks_fts MATCH ? AND {clause} ORDER BY s LIMIT ?"
        )
        params = [expression, *filter_params, limit]
    return [(row[0], -row[1]) for row in conn.execute(sql, params)]
