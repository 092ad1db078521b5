"""Search: BM25 (fts), cosine similarity (vector), and their fusion (hybrid).

Hybrid takes the best `candidates` of each signal, filtered the same way, and fuses them as fusion.py says
(a weighted sum of cosine and BM25 on an absolute scale by default; reciprocal rank fusion on request).
The BM25 query and the BM25 ceiling run in the request thread while the query is embedded on the query
thread. The method, depth and weights come from the config, tuned on SciFact (docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING

from . import documents, fts
from .documents import DocumentFilter
from .errors import Conflict, NotReady
from .fusion import Fusion, Ranking

if TYPE_CHECKING:
    import numpy as np

    from .engine import Engine

MODES = ("hybrid", "fts", "vector")


@dataclasses.dataclass(frozen=True)
class SearchRequest:
    query: str
    top_n: int = 10
    where: DocumentFilter = DocumentFilter()
    mode: str = "hybrid"


def search(engine: Engine, request: SearchRequest) -> dict[str, object]:
    started = time.perf_counter()
    mode = request.mode if engine.vector_search_ready() else "fts"
    query_vector: Future[np.ndarray] | None = None
    if mode != "fts":
        embedder = engine.embedders.current()
        assert embedder is not None  # vector_search_ready() said so
        query_vector = embedder.submit_query(request.query)  # on the query thread, while BM25 runs here
    conn = engine.db.connection()
    with engine.db.snapshot():
        ranked = _rank(engine, conn, request, mode, query_vector)[: request.top_n]
        chunks = documents.get_chunks(conn, [chunk_id for chunk_id, _ in ranked])
    return {
        "query": request.query,
        "mode": mode,
        "took_ms": round((time.perf_counter() - started) * 1000, 3),
        "results": [{**chunks[chunk_id], "score": score} for chunk_id, score in ranked if chunk_id in chunks],
    }


def _rank(
    engine: Engine, conn: sqlite3.Connection, request: SearchRequest, mode: str,
    query_vector: Future[np.ndarray] | None,
) -> Ranking:
    config = engine.config
    depth = max(config.candidates, request.top_n) if mode == "hybrid" else request.top_n
    lexical: Ranking = []
    ceiling = 0.0
    if mode != "vector":  # runs while the query is being embedded
        lexical = fts.search(conn, request.query, request.where, depth, config.bm25_title_weight,
                             config.bm25_text_weight)
        if mode == "hybrid" and config.fusion == "convex":
            ceiling = fts.score_ceiling(conn, request.query)
    if query_vector is None or engine.vectors is None:
        return lexical
    vector = query_vector.result()
    allowed = None if request.where.is_empty() else documents.matching_document_ids(conn, request.where)
    semantic = engine.vectors.search(vector, depth, allowed)
    if mode == "vector":
        return semantic
    index = engine.vectors
    method = Fusion(config.fusion, config.fts_weight, config.vector_weight, config.rrf_k)
    return method.fuse(lexical, ceiling, semantic, lambda chunk_ids: index.similarities(vector, chunk_ids))


def related(engine: Engine, chunk_id: int, top_n: int, same_document: bool) -> dict[str, object]:
    """Chunks most similar to a stored chunk, by vector; other documents only unless same_document."""
    conn = engine.db.connection()
    with engine.db.snapshot():
        chunk = documents.get_chunk(conn, chunk_id)
    if not engine.vector_search_ready():
        if engine.embedders.state == "loading":
            raise NotReady("the embedding model is still loading; retry in a few seconds")
        raise Conflict(f"this engine has no vectors ({engine.embedders.reason}); related chunks need them")
    assert engine.vectors is not None
    vector = engine.vectors.vector_of(chunk_id)
    if vector is None:
        raise NotReady(f"chunk {chunk_id} has no vector yet; the engine is still embedding stored chunks")
    exclude_document = None if same_document else int(chunk["document_id"])  # type: ignore[call-overload]
    hits = engine.vectors.search(vector, top_n, exclude_chunk=chunk_id, exclude_document=exclude_document)
    with engine.db.snapshot():
        found = documents.get_chunks(conn, [hit_id for hit_id, _ in hits])
    return {"results": [{**found[hit_id], "score": score} for hit_id, score in hits if hit_id in found]}
