"""SQL for nearest-neighbour search over the vectors in pgvector (`halfvec`, HNSW, cosine distance); storing
them is documents.py's. Plain functions over a connection inside the caller's read transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..base import DocumentFilter, Ranking
from .documents import parse_vector, vector_literal, where_sql

if TYPE_CHECKING:
    import numpy as np


def nearest(conn: Any, vector: np.ndarray, k: int, where: DocumentFilter | None, exclude_chunk: int | None,
            exclude_document: int | None, ef_search: int) -> Ranking:
    """The k chunks most similar to `vector`, (chunk_id, cosine) best first, filters applied before the cut;
    `ef_search` is HNSW's search breadth for this transaction."""
    clauses: list[str] = []
    params: list[object] = []
    if where is not None and not where.is_empty():
        clause, params = where_sql(where)
        clauses.append(clause)
    filtered = bool(clauses)  # taken before the exclusions below: only a filter can leave the walk short of k
    if exclude_chunk is not None:
        clauses.append("e.chunk_id <> %s")
        params.append(exclude_chunk)
    if exclude_document is not None:
        clauses.append("c.document_id <> %s")
        params.append(exclude_document)
    joins = " JOIN chunks c ON c.id = e.chunk_id JOIN documents d ON d.id = c.document_id" if clauses else ""
    where_clause = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    query = vector_literal(vector)
    # HNSW's breadth for this transaction, and, since filters prune the graph's candidates, iterative scans
    # that keep walking until k pass them: both in one round trip.
    conn.execute("SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', 'relaxed_order', true)",
                 (str(int(ef_search)),))
    rows = conn.execute(
        "SELECT chunk_id, distance FROM (SELECT e.chunk_id, e.vector <=> %s::halfvec AS distance "
        f"FROM embeddings e{joins}{where_clause} ORDER BY distance LIMIT %s) s ORDER BY distance, chunk_id",
        [query, *params, k],
    ).fetchall()
    if filtered and len(rows) < k:
        # pgvector's iterative scan gives up after `hnsw.max_scan_tuples` (20,000) tuples: a filter whose chunks lay
        # beyond that many nearer ones (a small collection beside a large corpus on the query's subject) was
        # answered with a few arbitrary chunks, or none. Fewer than k is also every search of a filter that allows
        # fewer than k, whose exact ranking is cheap. Counting the allowed chunks first to rank up to 20,000 of them
        # exactly (as SQLite does in process) cost 13-60 ms a filtered search where the walk takes 2 ms
        # (docs/benchmarks.md, "A filtered vector search on PostgreSQL").
        return _exact(conn, query, k, joins, where_clause, params)
    return [(int(r[0]), 1.0 - float(r[1])) for r in rows]


def _exact(conn: Any, query: str, k: int, joins: str, where_clause: str, params: list[object]) -> Ranking:
    """The k nearest of the chunks the clauses allow, by comparing the query with each of them: the distances
    are computed in a materialized CTE, so that no plan can take them from the HNSW index's approximate order."""
    rows = conn.execute(
        f"WITH scored AS MATERIALIZED (SELECT e.chunk_id, e.vector <=> %s::halfvec AS distance "
        f"FROM embeddings e{joins}{where_clause}) "
        "SELECT chunk_id, distance FROM scored ORDER BY distance, chunk_id LIMIT %s",
        [query, *params, k],
    ).fetchall()
    return [(int(r[0]), 1.0 - float(r[1])) for r in rows]


def similarities(conn: Any, vector: np.ndarray, chunk_ids: list[int]) -> dict[int, float]:
    """The cosine of `vector` with each of these chunks that has a vector."""
    rows = conn.execute("SELECT chunk_id, 1 - (vector <=> %s::halfvec) FROM embeddings WHERE chunk_id = ANY(%s)",
                        (vector_literal(vector), chunk_ids)).fetchall()
    return {int(r[0]): float(r[1]) for r in rows}


def vector_of(conn: Any, chunk_id: int) -> np.ndarray | None:
    row = conn.execute("SELECT vector::text FROM embeddings WHERE chunk_id = %s", (chunk_id,)).fetchone()
    return parse_vector(row[0]) if row else None
