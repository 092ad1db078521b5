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
    if exclude_chunk is not None:
        clauses.append("e.chunk_id <> %s")
        params.append(exclude_chunk)
    if exclude_document is not None:
        clauses.append("c.document_id <> %s")
        params.append(exclude_document)
    joins = " JOIN chunks c ON c.id = e.chunk_id JOIN documents d ON d.id = c.document_id" if clauses else ""
    where_clause = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    # HNSW's breadth for this transaction, and, since filters prune the graph's candidates, iterative scans
    # that keep walking until k pass them: both in one round trip.
    conn.execute("SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', 'relaxed_order', true)",
                 (str(int(ef_search)),))
    rows = conn.execute(
        "SELECT chunk_id, distance FROM (SELECT e.chunk_id, e.vector <=> %s::halfvec AS distance "
        f"FROM embeddings e{joins}{where_clause} ORDER BY distance LIMIT %s) s ORDER BY distance, chunk_id",
        [vector_literal(vector), *params, k],
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
