"""Retrieval quality of the local engine on SciFact (BEIR), through its HTTP API, per search mode.

Not a test. It starts its own engine on a free 127.0.0.1 port, ingests every abstract of
the SciFact corpus (BEIR format, --corpus DIR) as a note (`title`, `text`, `source_path` = `scifact/<_id>`), waits for
the queue to drain (with a progress bar), then sends every claim that has judgements in `qrels/train.tsv` as
a query in each mode (`top_n` 100, one at a time). Chunk hits collapse to documents, best chunk first, and
the script prints nDCG@10, recall@100 and the client-side latency p50/p95 per mode, plus ingestion time.

Recall@100 counts the documents found in the top 100 *chunks* (the API's largest `top_n`); when a document
has several chunks among them, fewer than 100 documents are ranked, so the figure is a lower bound of the
usual recall@100 (the mean number of documents ranked is printed beside it).

    python bench/retrieval.py                               # fresh engine: ingest (about 8 min), evaluate
    python bench/retrieval.py --data /tmp/scifact --keep    # keep the ingested data directory ...
    python bench/retrieval.py --data /tmp/scifact           # ... and evaluate again without re-ingesting
    python bench/retrieval.py --data /tmp/scifact --set KB_ENGINE_RRF_K=60 --set KB_ENGINE_FUSION=rrf
    python bench/retrieval.py --plot docs/retrieval-scifact.png
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from common import (SCIFACT, EngineApi, add_engine_options, benchmark_engine, engine_env, load_beir, percentile,
                    progress, write_result)

DEFAULT_CORPUS = SCIFACT
MODES = ("fts", "vector", "hybrid")
TOP_N = 100  # the API's largest top_n
# Published nDCG@10 on SciFact (BEIR test split): the figures the issue asks us to beat.
PUBLISHED = {
    "BM25 (BEIR paper)": 0.665,
    "BM25 + stemming": 0.686,
    "all-MiniLM-L6-v2 (MTEB)": 0.645,
}
Qrels = dict[str, dict[str, int]]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="BEIR directory (default: %(default)s)")
    parser.add_argument("--split", default="train", help="judgements to use: qrels/SPLIT.tsv (default: train)")
    add_engine_options(parser, "the corpus", "KB_ENGINE_RRF_K=60")
    parser.add_argument("--modes", default=",".join(MODES), help="modes to evaluate (default: %(default)s)")
    parser.add_argument("--queries", type=int, help="evaluate only the first N claims")
    parser.add_argument("--plot", type=Path, help="also draw nDCG@10 per mode beside the published baselines")
    return parser.parse_args(argv)


# --- data -------------------------------------------------------------------------------------------


def load_qrels(path: Path) -> Qrels:
    """query id -> {document id: relevance}; rows with relevance 0 are not relevant and dropped."""
    qrels: Qrels = {}
    with open(path, encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            if int(row["score"]) > 0:
                qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
    return qrels


def doc_id_of(source_path: str | None) -> str | None:
    """`scifact/<_id>` back to the corpus id."""
    if not source_path or not source_path.startswith("scifact/"):
        return None
    return source_path.removeprefix("scifact/")


def collapse(chunk_doc_ids: Sequence[str | None]) -> list[str]:
    """Documents in the order of their best chunk (results come best first)."""
    return list(dict.fromkeys(doc for doc in chunk_doc_ids if doc is not None))


# --- metrics ----------------------------------------------------------------------------------------


def ndcg_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k with graded gains (SciFact's are all 1), log2 discount, as trec_eval and BEIR compute it."""
    dcg = sum(relevant.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(gain / math.log2(rank + 2) for rank, gain in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int = 100) -> float:
    return len(set(ranked[:k]) & set(relevant)) / len(relevant) if relevant else 0.0


def evaluate(runs: Mapping[str, Sequence[str]], qrels: Qrels) -> dict[str, float]:
    """Mean nDCG@10 and recall@100 over the judged queries (a query without a run scores 0)."""
    ids = list(qrels)
    return {"ndcg@10": statistics.fmean(ndcg_at(runs.get(q, []), qrels[q]) for q in ids),
            "recall@100": statistics.fmean(recall_at(runs.get(q, []), qrels[q]) for q in ids)}


# --- through the API --------------------------------------------------------------------------------


def ingest(api: EngineApi, corpus: Sequence[Mapping[str, str]]) -> float:
    """Queue every abstract as a note, wait until the engine has indexed them all; seconds taken."""
    from tqdm import tqdm

    held = api.get("/status")["documents"]["total"]
    if held >= len(corpus):
        progress(f"the engine already holds {held} documents: not ingesting again")
        return float("nan")
    if held:
        raise SystemExit(f"the data directory holds {held} documents, not the corpus: use a fresh one")
    started = time.perf_counter()
    for document in tqdm(corpus, desc="queueing", unit="doc", mininterval=1.0):
        api.post("/jobs", {"title": document["title"], "text": document["text"],
                           "source_path": f"scifact/{document['_id']}"})
    with tqdm(total=len(corpus), desc="indexing", unit="doc", mininterval=1.0) as bar:
        while True:
            status = api.get("/status")
            bar.update(status["queue"]["done"] + status["queue"]["failed"] - bar.n)
            if status["queue"]["queued"] + status["queue"]["running"] == 0:
                break
            time.sleep(1.0)
    if status["queue"]["failed"]:
        raise SystemExit(f"{status['queue']['failed']} ingestion job(s) failed")
    return time.perf_counter() - started


def run_mode(api: EngineApi, queries: Mapping[str, str], mode: str) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """Every query in `mode`: the documents ranked per query, and latency figures over all of them."""
    from tqdm import tqdm

    for text in list(queries.values())[:10]:  # warm caches and code paths
        api.post("/search", {"query": text, "mode": mode, "top_n": TOP_N})
    runs: dict[str, list[str]] = {}
    client_ms: list[float] = []
    server_ms: list[float] = []
    for query_id, text in tqdm(queries.items(), desc=mode, unit="query", mininterval=1.0):
        started = time.perf_counter()
        result = api.post("/search", {"query": text, "mode": mode, "top_n": TOP_N})
        client_ms.append((time.perf_counter() - started) * 1000)
        server_ms.append(float(result["took_ms"]))
        if result["mode"] != mode:
            raise SystemExit(f"asked for {mode}, the engine answered in {result['mode']} (is the model loaded?)")
        runs[query_id] = collapse([doc_id_of(hit.get("source_path")) for hit in result["results"]])
    latency = {"queries": len(client_ms), "p50_ms": round(percentile(client_ms, 0.5), 2),
               "p95_ms": round(percentile(client_ms, 0.95), 2),
               "server_p50_ms": round(percentile(server_ms, 0.5), 2),
               "server_p95_ms": round(percentile(server_ms, 0.95), 2),
               "documents_ranked": round(statistics.fmean(len(docs) for docs in runs.values()), 1),
               "load_average_1m": round(os.getloadavg()[0], 2)}
    return runs, latency


# --- output -----------------------------------------------------------------------------------------


def print_table(rows: Sequence[Mapping[str, Any]], ingestion_seconds: float) -> None:
    header = f"{'mode':>7} {'nDCG@10':>8} {'recall@100':>10} {'docs/query':>10} {'p50 ms':>7} {'p95 ms':>7} {'load':>5}"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(f"{row['mode']:>7} {row['ndcg@10']:>8.4f} {row['recall@100']:>10.4f} {row['documents_ranked']:>10} "
              f"{row['p50_ms']:>7} {row['p95_ms']:>7} {row['load_average_1m']:>5}")
    if not math.isnan(ingestion_seconds):
        print(f"ingestion: {ingestion_seconds / 60:.1f} min")


def plot(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """A bar per engine mode beside the published baselines (matplotlib: pip install 'kb-bridge[bench]')."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"engine {row['mode']}" for row in rows] + list(PUBLISHED)
    values = [float(row["ndcg@10"]) for row in rows] + list(PUBLISHED.values())
    colours = ["#1f77b4"] * len(rows) + ["#aaaaaa"] * len(PUBLISHED)
    figure, axes = plt.subplots(figsize=(8, 4))
    bars = axes.barh(labels[::-1], values[::-1], color=colours[::-1])
    axes.bar_label(bars, fmt="%.3f", padding=3)
    axes.axvline(0.72, color="#d62728", linestyle="--", linewidth=1, label="target for hybrid (0.72)")
    axes.set_xlim(0.5, 0.8)
    axes.set_xlabel("nDCG@10 on SciFact")
    axes.set_title("Local engine (train claims) and published baselines (test claims)")
    axes.legend(loc="lower right")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


# --- main -------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    corpus, all_queries = load_beir(args.corpus)
    qrels = load_qrels(args.corpus / "qrels" / f"{args.split}.tsv")
    if args.queries:
        qrels = dict(list(qrels.items())[: args.queries])
    queries = {query_id: all_queries[query_id] for query_id in qrels}
    env = engine_env(args.set)
    with benchmark_engine(args, env, "retrieval") as engine:
        api = EngineApi(engine.url)
        ingestion_seconds = ingest(api, corpus)
        status = api.get("/status")
        rows = []
        for mode in args.modes.split(","):
            runs, latency = run_mode(api, queries, mode)
            rows.append({"mode": mode, **evaluate(runs, qrels), **latency})
    print_table(rows, ingestion_seconds)
    path = write_result("retrieval", {
        "corpus": str(args.corpus), "split": args.split, "queries": len(queries), "engine_env": env,
        "documents": status["documents"]["total"], "chunks": status["chunks"],
        "ingestion_seconds": None if math.isnan(ingestion_seconds) else round(ingestion_seconds, 1),
        "modes": rows,
    })
    print(f"results written to {path}")
    if args.plot:
        plot(rows, args.plot)
        print(f"plot written to {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
