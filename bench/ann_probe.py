"""Where ANN recall is lost on a search_scale.py tier: the format, the library, or the graph. Not a test.

On a tier's stored vectors (float32, from its engine.sqlite3) and the first `--queries` SciFact claims:
exact top 10 in float32 against (1) exact search over the float16 copies, (2) usearch's exhaustive search
over the engine's saved graph, (3) the saved graph at several search breadths, and, with --connectivity and
--expansion-add, (4) a graph built here with other parameters, and with --postgres, (5) pgvector's HNSW
index in a database that `kb-bridge migrate` filled from the same tier, at each search breadth (ef_search,
at most 1,000), with the time of each SQL query (p50 and p95 over the queries, after a warm-up pass).

    python bench/ann_probe.py --data /tmp/scale/tier-1000000
    python bench/ann_probe.py --data /tmp/scale/tier-1000000 --connectivity 32 --expansion-add 128
    python bench/ann_probe.py --data /tmp/scale/tier-1000000 --postgres postgresql://... --ef 40,64,128
"""

from __future__ import annotations

import argparse
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from common import SCIFACT, load_beir, percentile, progress


def top10(keys: np.ndarray, matrix: np.ndarray, query: np.ndarray) -> set[int]:
    """The keys of the 10 rows of `matrix` most similar to `query`, by exact comparison."""
    return set(keys[np.argpartition(-(matrix @ query), 10)[:10]].tolist())


def overlap(exact: list[set[int]], found: list[set[int]]) -> float:
    return sum(len(e & f) for e, f in zip(exact, found, strict=True)) / (10 * len(exact))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a tier's data directory")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--ef", default="128,512,2048,8192", help="search breadths to try (usearch's expansion_search, pgvector's ef_search)")
    parser.add_argument("--connectivity", type=int, help="also build a graph with this connectivity")
    parser.add_argument("--expansion-add", type=int, default=128, help="... and this build breadth")
    parser.add_argument("--postgres", metavar="URL", help="probe pgvector in this database instead of usearch")
    parser.add_argument("--rerank", default="", help="also take this many candidates from each graph and keep the 10 "
                        "whose float16 vectors are nearest by exact cosine in float32 arithmetic (e.g. 20,50)")
    args = parser.parse_args(argv)
    from usearch.index import Index

    from kb_bridge.local_engine.embedding.embedder import bundled_model_dir, load_sentence_transformer

    conn = sqlite3.connect(args.data / "engine.sqlite3")
    ids, blobs = zip(*conn.execute("SELECT chunk_id, vector FROM embeddings"), strict=True)
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(ids), -1)
    keys = np.asarray(ids, dtype=np.uint64)
    _, claims = load_beir(SCIFACT)
    model = load_sentence_transformer(bundled_model_dir(), "cpu")
    queries = model.encode(list(claims.values())[: args.queries], normalize_embeddings=True).astype(np.float32)
    exact = [top10(keys, matrix, q) for q in queries]
    breadths = [int(e) for e in args.ef.split(",")]
    if args.postgres:
        probe_postgres(args.postgres, queries, exact, breadths)
        return 0
    half = matrix.astype(np.float16).astype(np.float32)
    print(f"float16 exact against float32 exact: {overlap(exact, [top10(keys, half, q) for q in queries]):.3f}")
    saved = Index.restore(str(args.data / "indexes" / "vectors.usearch"), view=False)
    print(f"usearch exhaustive: {overlap(exact, [set(saved.search(q, 10, exact=True).keys.tolist()) for q in queries]):.3f}")
    graphs = [("saved graph", saved)]
    if args.connectivity:
        progress(f"building connectivity {args.connectivity}, expansion_add {args.expansion_add}")
        built = Index(ndim=matrix.shape[1], metric="cos", dtype="f16", connectivity=args.connectivity,
                      expansion_add=args.expansion_add)
        started = time.perf_counter()
        for start in range(0, len(keys), 20_000):
            built.add(keys[start : start + 20_000], matrix[start : start + 20_000], threads=0)
        print(f"built in {time.perf_counter() - started:.0f} s, {built.memory_usage >> 20} MiB")
        graphs.append((f"connectivity {args.connectivity}", built))
    for name, graph in graphs:
        for ef in breadths:
            graph.expansion_search = ef
            started = time.perf_counter()
            found = [set(graph.search(q, 10).keys.tolist()) for q in queries]
            per_query = (time.perf_counter() - started) / len(queries) * 1000
            print(f"{name}, ef {ef}: recall@10 {overlap(exact, found):.3f}, {per_query:.2f} ms per query")
            for ask in [int(n) for n in args.rerank.split(",") if n]:
                started = time.perf_counter()
                found = [reranked(graph, q, ask) for q in queries]
                per_query = (time.perf_counter() - started) / len(queries) * 1000
                print(f"{name}, ef {ef}, top {ask} re-ranked: recall@10 {overlap(exact, found):.3f}, "
                      f"{per_query:.2f} ms per query")
    return 0


def reranked(graph: Any, query: np.ndarray, ask: int) -> set[int]:
    """The graph's `ask` nearest, re-scored exactly over their stored float16 vectors; the best 10."""
    candidates = graph.search(query, ask).keys
    vectors = np.asarray(graph.get(candidates), dtype=np.float32).reshape(len(candidates), -1)
    return set(candidates[np.argsort(-(vectors @ query), kind="stable")[:10]].tolist())


def probe_postgres(url: str, queries: np.ndarray, exact: list[set[int]], breadths: list[int]) -> None:
    import psycopg

    from kb_bridge.local_engine.store.postgres.documents import vector_literal

    literals = [vector_literal(q) for q in queries]
    sql = "SELECT chunk_id FROM embeddings ORDER BY vector <=> %s::halfvec LIMIT 10"
    with psycopg.connect(url, autocommit=True) as conn:
        for literal in literals:  # warm the index's pages into shared buffers
            conn.execute(sql, (literal,)).fetchall()
        for ef in breadths:
            conn.execute(f"SET hnsw.ef_search = {int(ef)}")
            found, times = [], []
            for literal in literals:
                started = time.perf_counter()
                found.append({int(row[0]) for row in conn.execute(sql, (literal,)).fetchall()})
                times.append((time.perf_counter() - started) * 1000)
            print(f"pgvector, ef_search {ef}: recall@10 {overlap(exact, found):.3f}, "
                  f"p50 {percentile(times, 0.5):.2f} ms, p95 {percentile(times, 0.95):.2f} ms per query")


if __name__ == "__main__":
    raise SystemExit(main())
