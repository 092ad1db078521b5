"""Benchmark of the local kb engine through its HTTP API: ingestion throughput and search latency.

Not a test. It starts its own engine on a free 127.0.0.1 port (a fresh data directory unless --data),
ingests a corpus up to each size tier (default 1k, 10k, 100k chunks), and after each tier runs the same
queries in each search mode, one at a time, measuring the client-side round trip.

Corpus: SciFact (BEIR) abstracts and claims (--corpus; default common.SCIFACT), each
abstract one note. SciFact yields about 10.6k chunks, and embedding 100k distinct chunks on a 2-core CPU
takes over an hour, so the tiers beyond the corpus re-ingest it under new source paths (same titles):
the chunk texts repeat, and the engine reuses the stored vector of a chunk whose exact title and text it
has already embedded. Up to 10k every chunk is embedded for real; the 100k tier's ingestion figure is
therefore "chunks/s with vectors reused" and is reported as such. Its search figures are real: the FTS
index and the vector matrix hold 100k rows.

    python bench/engine_bench.py                       # all tiers (about 25 minutes on 2 cores)
    python bench/engine_bench.py --tiers 1000,10000 --queries 200
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (REPO, SCIFACT, EngineApi, Service, load_beir, machine, percentile, start_engine, vm_rss_kib,
                    worker_pids)

DEFAULT_CORPUS = SCIFACT
MODES = ("fts", "hybrid", "vector")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiers", default="1000,10000,100000", help="chunk counts to measure at (ascending)")
    parser.add_argument("--queries", type=int, default=300, help="queries per mode and tier")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                        help="BEIR directory with corpus.jsonl and queries.jsonl (default: %(default)s)")
    parser.add_argument("--data", type=Path, help="engine data directory (default: a fresh temporary one)")
    parser.add_argument("--no-embeddings", action="store_true", help="run the engine full-text only")
    parser.add_argument("--threads", type=int, default=8, help="engine request threads")
    parser.add_argument("--out", type=Path, help="JSON results file (default: bench/results/engine-<time>.json)")
    return parser.parse_args(argv)


def engine_rss_mib(engine: Service) -> float:
    """Resident memory of the engine's processes (gunicorn master and worker)."""
    return sum(vm_rss_kib(pid) for pid in [engine.process.pid, *worker_pids(engine)]) / 1024


# --- corpus -----------------------------------------------------------------------------------------


class NoteSource:
    """The corpus as notes, then again and again under new source paths (`round` > 0).

    The titles stay the same: the model reads a chunk with its title, so a vector is reused only for the
    same title and text.
    """

    def __init__(self, corpus: list[dict[str, str]]) -> None:
        self.corpus = corpus
        self.position = 0

    @property
    def round(self) -> int:
        return self.position // len(self.corpus)

    def next(self) -> dict[str, Any]:
        document = self.corpus[self.position % len(self.corpus)]
        round_ = self.round
        self.position += 1
        return {"text": document["text"], "title": document["title"][:200],
                "source_path": f"scifact/{round_}/{document['_id']}", "tags": ["bench"]}


# --- measurements -----------------------------------------------------------------------------------


def ingest_until(engine: EngineApi, notes: NoteSource, target_chunks: int) -> dict[str, Any]:
    """Queue notes until the engine holds `target_chunks`; return throughput figures.

    The clock runs from the first queued note until the queue is empty, so the rate covers HTTP,
    queueing, parsing, chunking, embedding and indexing.
    """
    start_chunks = engine.get("/status")["chunks"]
    started = last_report = time.perf_counter()
    queued = 0
    while True:
        status = engine.get("/status")
        chunks = status["chunks"]
        pending = status["queue"]["queued"] + status["queue"]["running"]
        if chunks >= target_chunks and pending == 0:
            break
        finished = queued - pending
        per_note = (chunks - start_chunks) / finished if finished > 0 and chunks > start_chunks else 2.0
        if pending < 1000 and chunks + pending * per_note < target_chunks:
            for _ in range(min(200, int((target_chunks - chunks - pending * per_note) / per_note) + 1)):
                engine.post("/jobs", notes.next())
                queued += 1
        else:
            time.sleep(0.2)
        now = time.perf_counter()
        if now - last_report > 10:
            rate = (chunks - start_chunks) / (now - started)
            eta = (target_chunks - chunks) / rate if rate > 0 else float("inf")
            print(f"  {chunks:>7} chunks  {rate:7.1f} chunks/s  eta {eta / 60:5.1f} min", flush=True)
            last_report = now
    elapsed = time.perf_counter() - started
    status = engine.get("/status")
    added = status["chunks"] - start_chunks
    if status["queue"]["failed"]:
        print(f"  warning: {status['queue']['failed']} job(s) failed", flush=True)
    return {"chunks": status["chunks"], "documents": status["documents"]["total"], "added_chunks": added,
            "seconds": round(elapsed, 2), "chunks_per_second": round(added / elapsed, 1),
            "vectors": status["vectors"], "vectors_reused": notes.round > 0}


def measure_search(engine: EngineApi, queries: list[str], mode: str, top_n: int = 10) -> dict[str, Any]:
    for query in queries[:10]:  # warm caches and code paths
        engine.post("/search", {"query": query, "mode": mode, "top_n": top_n})
    client_ms: list[float] = []
    server_ms: list[float] = []
    for query in queries:
        started = time.perf_counter()
        result = engine.post("/search", {"query": query, "mode": mode, "top_n": top_n})
        client_ms.append((time.perf_counter() - started) * 1000)
        server_ms.append(result["took_ms"])
        if result["mode"] != mode:
            raise SystemExit(f"asked for {mode}, the engine answered {result['mode']}")
    return {"mode": mode, "queries": len(queries), "p50_ms": round(percentile(client_ms, 0.5), 2),
            "p95_ms": round(percentile(client_ms, 0.95), 2), "mean_ms": round(statistics.fmean(client_ms), 2),
            "server_p50_ms": round(percentile(server_ms, 0.5), 2),
            "server_p95_ms": round(percentile(server_ms, 0.95), 2)}


# --- main -------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tiers = sorted(int(t) for t in args.tiers.split(","))
    corpus, all_queries = load_beir(args.corpus)
    queries = list(all_queries.values())[: args.queries]
    modes = ("fts",) if args.no_embeddings else MODES
    workdir = Path(tempfile.mkdtemp(prefix="kb-engine-bench-"))
    data_dir = args.data or workdir / "data"
    print(f"engine data in {data_dir}, log in {workdir}", flush=True)
    service = start_engine(workdir, data_dir, {"KB_ENGINE_EMBEDDER": "none" if args.no_embeddings else "minilm",
                                               "KB_ENGINE_WAIT_FOR_MODEL": "1", "KB_ENGINE_THREADS": str(args.threads)})
    engine = EngineApi(service.url)
    results: dict[str, Any] = {"started_at": dt.datetime.now(dt.timezone.utc).isoformat(), "machine": machine(),
                               "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
                               "corpus": str(args.corpus), "tiers": []}
    try:
        status = engine.get("/status")
        results["engine"] = {"version": status["version"], "model": status["model"]}
        notes = NoteSource(corpus)
        for tier in tiers:
            print(f"ingesting up to {tier} chunks ...", flush=True)
            ingestion = ingest_until(engine, notes, tier)
            print(f"  {ingestion['chunks']} chunks in {ingestion['documents']} documents; "
                  f"{ingestion['chunks_per_second']} chunks/s", flush=True)
            searches = [measure_search(engine, queries, mode) for mode in modes]
            results["tiers"].append({"tier": tier, "ingestion": ingestion, "search": searches,
                                     "rss_mib": round(engine_rss_mib(service), 1),
                                     # Other work on the machine shows here (this one is shared).
                                     "load_average_1m": round(os.getloadavg()[0], 2)})
            for search in searches:
                print(f"  {search['mode']:>6}: p50 {search['p50_ms']} ms, p95 {search['p95_ms']} ms", flush=True)
    finally:
        service.stop()
    print_table(results)
    out = args.out or REPO / "bench" / "results" / f"engine-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"results written to {out}")
    return 0


def print_table(results: dict[str, Any]) -> None:
    print()
    print(f"machine: {results['machine']['cpu']}, {results['machine']['cpus']} cores")
    header = f"{'chunks':>8} {'docs':>6} {'ingest chunks/s':>16} {'mode':>6} {'p50 ms':>8} {'p95 ms':>8} {'server p95':>10} {'RSS MiB':>8}"
    print(header)
    print("-" * len(header))
    for tier in results["tiers"]:
        ingestion = tier["ingestion"]
        rate = f"{ingestion['chunks_per_second']}{'*' if ingestion['vectors_reused'] else ''}"
        for i, search in enumerate(tier["search"]):
            first = i == 0
            print(f"{ingestion['chunks'] if first else '':>8} {ingestion['documents'] if first else '':>6} "
                  f"{rate if first else '':>16} {search['mode']:>6} {search['p50_ms']:>8} {search['p95_ms']:>8} "
                  f"{search['server_p95_ms']:>10} {tier['rss_mib'] if first else '':>8}")
    print("* vectors reused: chunk texts repeat the corpus beyond its size (see the module docstring)")


if __name__ == "__main__":
    raise SystemExit(main())
