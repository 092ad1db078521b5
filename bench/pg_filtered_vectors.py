"""A filtered vector search on PostgreSQL: pgvector's HNSW walk, with and without ranking the filter's chunks
exactly. Not a test.

pgvector's iterative scan gives up after `hnsw.max_scan_tuples` (20,000) tuples, so a filter whose chunks lie
beyond that many nearer ones got a few arbitrary chunks, or none. Three ways are timed here side by side, in
turns, on one database, with their recall@k against the exact answer:

- `walk`: the HNSW walk alone (the engine before the fix);
- `walk, then exact when short` (the engine now, store/postgres/vectors.py): the walk, and when it ends with
  fewer than k, the filter's chunks ranked exactly;
- `count, exact up to 20,000`: count the filter's chunks first (up to 20,001) and rank them exactly when there
  are at most 20,000, as the SQLite store does in process (the fix first proposed; not kept).

The chunks are random unit vectors in collections of several sizes (`--chunks` in all: 5/6 in `big`, the rest in
`mid` and `small`, and 5 in `tiny`), plus a `crowded` case: a collection of 2,001 chunks behind 21,000 of `big`
placed nearer the queries, the case the fix is for.

    python bench/pg_filtered_vectors.py                      # 60,000 chunks, 60 queries per case and way
    python bench/pg_filtered_vectors.py --chunks 200000 --queries 30
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import psycopg

from common import percentile, progress, write_result
from kb_bridge.local_engine.store.base import DocumentFilter, Ranking
from kb_bridge.local_engine.store.postgres import schema, vectors
from kb_bridge.local_engine.store.postgres.db import Database
from kb_bridge.local_engine.store.postgres.documents import vector_literal, where_sql
from kb_bridge.testing.postgres import PostgresServer

DIM = 384
K = 10
EXACT_SUBSET = 20_000
STAMP = "2026-01-01T00:00:00.000Z"


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(np.float32)


def corpus(chunks: int, queries: np.ndarray, rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    """(collection tag, vector) per chunk: random collections, and `crowded` behind 21,000 of `big` near the
    first query's side of the space."""
    big = chunks * 5 // 6
    sizes = {"big": big, "mid": (chunks - big) * 4 // 5, "small": (chunks - big) // 5, "tiny": 5}
    rows = [(f"collection:{name}", v) for name, n in sizes.items() for v in unit(rng.standard_normal((n, DIM)))]
    centre = unit(queries.mean(axis=0))
    crowd = unit(centre + 0.05 * rng.standard_normal((21_000, DIM)))
    behind = unit(-centre + 0.3 * rng.standard_normal((2_001, DIM)))
    rows += [("collection:big", v) for v in crowd] + [("collection:crowded", v) for v in behind]
    return rows


def load(url: str, rows: list[tuple[str, np.ndarray]]) -> None:
    """Written in bulk, the HNSW index built after (the store's writes would insert into it row by row)."""
    database = Database(url, max_connections=1)
    with database.connection() as conn:
        schema.migrate(conn)
    with database.write() as conn:
        schema.vector_table(conn, DIM)
    database.close()
    with psycopg.connect(url) as conn:
        conn.execute("DROP INDEX embeddings_hnsw")
        with conn.cursor().copy("COPY documents (id, title, doc_type, size_bytes, sha256, created_at, updated_at) "
                                "FROM STDIN") as copy:
            for ident in range(1, len(rows) + 1):
                copy.write_row((ident, "t", "note", 1, "x", STAMP, STAMP))
        with conn.cursor().copy("COPY document_tags (document_id, tag) FROM STDIN") as copy:
            for ident, (tag, _) in enumerate(rows, start=1):
                copy.write_row((ident, tag))
        with conn.cursor().copy("COPY chunks (id, document_id, chunk_index, title, text, text_sha256) FROM STDIN") as copy:
            for ident in range(1, len(rows) + 1):
                copy.write_row((ident, ident, 0, "t", "x", "x"))
        with conn.cursor().copy("COPY embeddings (chunk_id, vector) FROM STDIN") as copy:
            for ident, (_, vector) in enumerate(rows, start=1):
                copy.write_row((ident, vector_literal(vector)))
        started = time.monotonic()
        conn.execute(schema.HNSW_INDEX)
        progress(f"HNSW index of {len(rows):,} vectors built in {time.monotonic() - started:.1f} s")
        conn.execute("ANALYZE")


def _statement(where: DocumentFilter) -> tuple[str, str, list[object]]:
    clause, params = where_sql(where)
    return " JOIN chunks c ON c.id = e.chunk_id JOIN documents d ON d.id = c.document_id", f" WHERE {clause}", params


def walk(conn: Any, query: np.ndarray, where: DocumentFilter) -> Ranking:
    """The engine before: HNSW with iterative scans, nothing else."""
    joins, where_clause, params = _statement(where)
    conn.execute("SELECT set_config('hnsw.ef_search', '128', true), set_config('hnsw.iterative_scan', 'relaxed_order', true)")
    rows = conn.execute(
        "SELECT chunk_id, distance FROM (SELECT e.chunk_id, e.vector <=> %s::halfvec AS distance "
        f"FROM embeddings e{joins}{where_clause} ORDER BY distance LIMIT %s) s ORDER BY distance, chunk_id",
        [vector_literal(query), *params, K]).fetchall()
    return [(int(r[0]), 1.0 - float(r[1])) for r in rows]


def exact(conn: Any, query: np.ndarray, where: DocumentFilter) -> Ranking:
    joins, where_clause, params = _statement(where)
    return vectors._exact(conn, vector_literal(query), K, joins, where_clause, params)


def engine_now(conn: Any, query: np.ndarray, where: DocumentFilter) -> Ranking:
    return vectors.nearest(conn, query, K, where, None, None, 128)


def count_then_exact(conn: Any, query: np.ndarray, where: DocumentFilter) -> Ranking:
    """The fix first proposed: count the filter's chunks, exact when at most EXACT_SUBSET."""
    joins, where_clause, params = _statement(where)
    (allowed,) = conn.execute(f"SELECT count(*) FROM (SELECT 1 FROM embeddings e{joins}{where_clause} "
                              f"LIMIT {EXACT_SUBSET + 1}) n", params).fetchone()
    return exact(conn, query, where) if allowed <= EXACT_SUBSET else engine_now(conn, query, where)


WAYS: dict[str, Callable[[Any, np.ndarray, DocumentFilter], Ranking]] = {
    "walk": walk, "walk, then exact when short": engine_now, "count, exact up to 20,000": count_then_exact,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=60_000, help="random chunks besides the crowded case")
    parser.add_argument("--queries", type=int, default=60)
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    queries = unit(rng.standard_normal((args.queries, DIM)) * 0.2 + 1.0)  # one side of the space, as a topic
    server = PostgresServer().start()
    try:
        url = server.new_database()
        load(url, corpus(args.chunks, queries, rng))
        database = Database(url, max_connections=1)
        cases = ["tiny", "small", "mid", "big", "crowded"]
        results: dict[str, dict[str, Any]] = {}
        for case in cases:
            where = DocumentFilter(tags=(f"collection:{case}",))
            with database.connection() as conn:
                truth = [{c for c, _ in exact(conn, q, where)} for q in queries]
            times: dict[str, list[float]] = {way: [] for way in WAYS}
            recall: dict[str, list[float]] = {way: [] for way in WAYS}
            for _ in range(3):  # in turns, so that the machine's load falls on every way alike
                for way, run in WAYS.items():
                    for query, best in zip(queries, truth, strict=True):
                        with database.connection() as conn:
                            started = time.perf_counter()
                            found = run(conn, query, where)
                            times[way].append(time.perf_counter() - started)
                        recall[way].append(len({c for c, _ in found} & best) / max(len(best), 1))
            results[case] = {way: {"p50_ms": round(statistics.median(times[way]) * 1000, 2),
                                   "p95_ms": round(percentile(times[way], 0.95) * 1000, 2),
                                   "recall_at_10": round(statistics.fmean(recall[way]), 3)} for way in WAYS}
            for way, row in results[case].items():
                progress(f"{case:8} {way:30} p50 {row['p50_ms']:7.2f} ms  p95 {row['p95_ms']:7.2f} ms  "
                         f"recall@10 {row['recall_at_10']:.3f}")
        database.close()
    finally:
        server.stop()
    write_result("pg_filtered_vectors", {"chunks": args.chunks, "queries": args.queries, "results": results})


if __name__ == "__main__":
    main()
