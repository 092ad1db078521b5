"""Full-text search in SQLite: BM25 over the FTS5 index of chunk titles and texts.

The query's words (store/query_terms.py) are each quoted and OR-ed: a natural-language question then ranks
by BM25 like a search engine does, instead of requiring every word (AND) or failing on `"`, `*`, `:`, `(`,
`-` or `NEAR`. A query with no word in it matches nothing rather than raising an error.

`score_ceiling` gives hybrid fusion an absolute scale for BM25 (search/fusion.py).
"""

from __future__ import annotations

import math
import sqlite3

from ..base import DocumentFilter, Ranking
from ..query_terms import query_words
from .documents import where_sql

# FTS5's bm25() constant k1 (fixed in SQLite): a term's contribution tends to idf * (k1 + 1) as its
# frequency in a row grows.
BM25_K1 = 1.2


def query_phrases(query: str) -> list[str]:
    """The query's searchable words, each quoted as an FTS5 phrase."""
    return [f'"{word}"' for word in query_words(query)]


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
) -> Ranking:
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
        clause, filter_params = where_sql(where, "d")
        sql = (
            f"SELECT f.rowid, {bm25} AS s FROM chunks_fts f JOIN chunks c ON c.id = f.rowid "
            f"JOIN documents d ON d.id = c.document_id WHERE chunks_fts MATCH ? AND {clause} ORDER BY s LIMIT ?"
        )
        params = [expression, *filter_params, limit]
    return [(row[0], -row[1]) for row in conn.execute(sql, params)]
