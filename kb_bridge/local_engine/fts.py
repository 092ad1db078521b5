"""Full-text search: BM25 over the FTS5 index of chunk titles and texts.

User queries never reach FTS5 as syntax. They are cut into word tokens, each token is quoted, and the
tokens are OR-ed: a natural-language question then ranks by BM25 like a search engine does, instead of
requiring every word (AND) or failing on `"`, `*`, `:`, `(`, `-` or `NEAR`. A query with no word in it
matches nothing rather than raising an error.

`score_ceiling` gives hybrid fusion an absolute scale for BM25 (see fusion.py).
"""

from __future__ import annotations

import math
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


# FTS5's bm25() constant k1 (fixed in SQLite): a term's contribution tends to idf * (k1 + 1) as its
# frequency in a row grows.
BM25_K1 = 1.2


def query_phrases(query: str) -> list[str]:
    """The query's searchable words, each quoted as an FTS5 phrase, without duplicates."""
    tokens = list(dict.fromkeys(token.lower() for token in _TOKEN.findall(query)))
    words = [token for token in tokens if token not in STOPWORDS] or tokens
    return [f'"{word}"' for word in words[:MAX_TERMS]]


def match_expression(query: str) -> str | None:
    """The FTS5 MATCH expression for a user query, or None when it has no searchable word."""
    return " OR ".join(query_phrases(query)) or None


def score_ceiling(conn: sqlite3.Connection, query: str) -> float:
    """The highest score (-bm25) a row could reach for this query: (k1 + 1) * the sum of its phrases' IDF.

    IDF as FTS5 computes it: ln((N - n + 0.5) / (n + 0.5)), at least 1e-6, for N rows of which n hold the
    phrase. A phrase found nowhere has the highest IDF, so a row that matches one common word of a query
    whose other words are absent from the corpus scores a small share of the ceiling: a weak lexical match.
    Costs one count per phrase (well under a millisecond at 10k chunks), run while the query is embedded.
    """
    phrases = query_phrases(query)
    if not phrases:
        return 0.0
    rows = conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    total = 0.0
    for phrase in phrases:
        hits = conn.execute("SELECT COUNT(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (phrase,)).fetchone()[0]
        total += max(math.log((rows - hits + 0.5) / (hits + 0.5)), 1e-6)
    return (BM25_K1 + 1) * total


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
