"""Search latency and memory of the local engine at 10k, 100k and 1M chunks; ANN recall; FTS5 beside tantivy.
Not a test.

**The corpora.** The 10k tier is SciFact itself (5,183 abstracts, 10.6k chunks), uploaded through the API
and embedded by the engine. The larger tiers are built from it through the store's own interface
(SqliteStore.submit / claim_job / complete_jobs, as the engine's worker writes), because embedding a million
chunks would take days on this CPU and the point here is search, not embedding time:

- copy r of chunk c has the title "<title> #r" and c's text with 15% of its words replaced by words drawn
  from the corpus's own word frequencies, so that posting lists and document lengths look like a corpus,
  not like one text repeated;
- its vector is a mixture of three real all-MiniLM-L6-v2 vectors (c's and two random chunks', with random
  weights summing to 1) plus Gaussian noise, normalised: it lies where real vectors lie (unlike uniform random
  vectors), spread over the space between them. Earlier versions of this benchmark made c's copies from c's
  vector plus noise (then plus a smaller share of one other vector): at 1M that puts ~95 near-copies around
  every real vector, clumps no real corpus has, in which an HNSW graph's neighbour lists fill up inside each
  clump and searches cannot leave it (recall@10 0.42 and 0.57 at 1M; 0.79 even searching 8,192 candidates;
  docs/benchmarks.md). The text of a copy does not match its vector any more: this benchmark times search
  and measures recall against exact search; bench/retrieval.py measures quality.

The engine builds the HNSW graph from the stored vectors when it starts (the rebuild path). Queries are the
SciFact claims, one at a time over loopback HTTP, `top_n` 10, after 10 warm-up queries; latency is the client's
round trip. Memory is the engine's resident set (gunicorn master and worker) after the queries.

**ANN recall@10**: for the first `--recall-queries` claims, the engine's vector search (HNSW above
KB_ENGINE_EXACT_SEARCH_BELOW) against exact top 10 by cosine over the same vectors, in this process.

**FTS5 against tantivy**: with `--fts5`, the same chunks also go into an SQLite FTS5 table (the engine's
full-text index before 3.4, porter tokenizer, title and text columns weighted 2:1) and the same queries run
on both in this process.

    python bench/search_scale.py --data-root /tmp/scale --keep           # all tiers: about an hour
    python bench/search_scale.py --tiers 10000,100000 --queries 200
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import requests

from common import SCIFACT, Service, load_beir, percentile, progress, start_engine, vm_rss_kib, worker_pids, write_result
from ingestion import corpus_files, upload_all, wait_drained
from kb_bridge.local_engine.store.base import DocumentFilter, FinishedJob, NewDocument, PreparedChunks, Submission
from kb_bridge.local_engine.store.query_terms import query_words
from kb_bridge.local_engine.store.sqlite import SqliteStore

MODES = ("fts", "vector", "hybrid")
NOW = "2026-11-23T00:00:00Z"
# The engine serves at once and loads the model (and builds or restores the vector index) behind;
# wait_drained() waits until every chunk's vector is searchable.
ENGINE_ENV = {"KB_ENGINE_EMBEDDER": "minilm"}
_WORD = re.compile(r"\w+")
# Written into a tier's directory once it is fully built: --keep reuses only tiers that have it, so an
# interrupted build is started again rather than measured half-grown.
COMPLETE = "tier-complete"
# How many real vectors a synthetic chunk's vector mixes (see the module docstring).
MIXED = 3


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=SCIFACT, help="BEIR directory (default: %(default)s)")
    parser.add_argument("--tiers", default="10000,100000,1000000", help="chunk counts (ascending; the first is the corpus)")
    parser.add_argument("--queries", type=int, default=300, help="queries per mode and tier")
    parser.add_argument("--documents", type=int, default=10**9, help="corpus documents for the first tier (default all)")
    parser.add_argument("--recall-queries", type=int, default=300, help="queries for ANN recall@10")
    parser.add_argument("--data-root", type=Path, help="where the tiers' data directories go (default: temporary)")
    parser.add_argument("--keep", action="store_true", help="reuse tiers already built under --data-root")
    parser.add_argument("--fts5", action="store_true", help="also time SQLite FTS5 on the same chunks")
    parser.add_argument("--noise", type=float, default=0.025, help="per-dimension noise of synthetic vectors")
    return parser.parse_args(argv)


# --- building the tiers --------------------------------------------------------------------------------------


def build_corpus_tier(data: Path, documents: Sequence[dict[str, str]], workdir: Path) -> None:
    engine = start_engine(workdir, data, ENGINE_ENV)
    try:
        http = requests.Session()
        upload_all(http, engine.url, documents)
        wait_drained(http, engine.url, 1)
    finally:
        engine.stop()
    (data / COMPLETE).touch()


def corpus_rows(data: Path) -> tuple[list[tuple[str, str]], np.ndarray]:
    """(title, text) of every chunk of the corpus tier, and their vectors (same order)."""
    conn = sqlite3.connect(data / "engine.sqlite3")
    rows = conn.execute("SELECT c.title, c.text, e.vector FROM chunks c JOIN embeddings e ON e.chunk_id = c.id "
                        "ORDER BY c.id").fetchall()
    conn.close()
    vectors = np.frombuffer(b"".join(row[2] for row in rows), dtype="<f4").reshape(len(rows), -1)
    return [(row[0], row[1]) for row in rows], vectors


class Synthesiser:
    """Copies of the corpus's chunks with perturbed words and noisy vectors (see the module docstring)."""

    def __init__(self, chunks: Sequence[tuple[str, str]], vectors: np.ndarray, noise: float, seed: int = 13) -> None:
        self.chunks, self.vectors, self.noise = chunks, vectors, noise
        self.random = random.Random(seed)
        self.numpy = np.random.default_rng(seed)
        counts = Counter(word for _, text in chunks for word in _WORD.findall(text.lower()))
        self.words, weights = zip(*counts.items(), strict=True)
        self.cumulative = np.cumsum(np.asarray(weights, dtype=np.float64))

    def text(self, text: str) -> str:
        words = text.split()
        replace = [i for i in range(len(words)) if self.random.random() < 0.15]
        picks = np.searchsorted(self.cumulative, self.numpy.random(len(replace)) * self.cumulative[-1])
        for i, pick in zip(replace, picks, strict=True):
            words[i] = self.words[int(pick)]
        return " ".join(words)

    def vector(self, index: int) -> np.ndarray:
        """A mixture of MIXED real vectors (chunk `index`'s and random others', Dirichlet weights) plus noise."""
        picks = [index, *(int(i) for i in self.numpy.integers(len(self.vectors), size=MIXED - 1))]
        weights = self.numpy.dirichlet(np.ones(MIXED)).astype(np.float32)
        noise = self.numpy.normal(0, self.noise, self.vectors.shape[1]).astype(np.float32)
        vector = weights @ self.vectors[picks] + noise
        return vector / np.linalg.norm(vector)

    def documents(self, start_copy: int, count: int) -> Iterator[tuple[NewDocument, PreparedChunks]]:
        made = 0
        copy = start_copy
        while made < count:
            for index, (title, text) in enumerate(self.chunks):
                if made >= count:
                    return
                new_text = self.text(text)
                new_title = f"{title} #{copy}"
                yield (NewDocument(new_title, "txt", f"synthetic/{copy}/{index}.txt", len(new_text), "0" * 64,
                                   new_text, ("synthetic",)),
                       PreparedChunks([new_text], self.vector(index)[None, :]))
                made += 1
            copy += 1


def grow_tier(source: Path, data: Path, target: int, synthesiser: Synthesiser) -> None:
    """Copy `source`'s database to `data` and add synthetic chunks through the store until it holds `target`."""
    shutil.rmtree(data, ignore_errors=True)  # what an interrupted build left
    data.mkdir(parents=True)
    with sqlite3.connect(source / "engine.sqlite3") as origin, sqlite3.connect(data / "engine.sqlite3") as copy:
        origin.backup(copy)
    store = SqliteStore(data / "engine.sqlite3")
    store.open()
    have = store.counts()["chunks"]
    started = time.monotonic()
    group: list[FinishedJob] = []
    for document, chunks in synthesiser.documents(1, target - have):
        job, _ = store.submit(Submission("file", {}, filename="synthetic.txt", priority=0), None, NOW)
        claimed = store.claim_job(NOW)
        assert claimed is not None and claimed.id == job["id"]
        group.append(FinishedJob(claimed.id, document, chunks))
        if len(group) == 2000:
            store.complete_jobs(group, NOW)
            group = []
            done = store.counts()["chunks"]
            if done % 50_000 < 2000:
                progress(f"  {done} chunks ({(done - have) / (time.monotonic() - started):.0f} chunks/s)")
    if group:
        store.complete_jobs(group, NOW)
    store.close()
    (data / COMPLETE).touch()


# --- measuring -----------------------------------------------------------------------------------------------


def engine_rss_mib(engine: Service) -> float:
    return sum(vm_rss_kib(pid) for pid in [engine.process.pid, *worker_pids(engine)]) / 1024


def measure_modes(url: str, queries: Sequence[str]) -> dict[str, Any]:
    http = requests.Session()
    results: dict[str, Any] = {}
    for mode in MODES:
        for text in queries[:10]:
            http.post(f"{url}/api/v1/search", json={"query": text, "mode": mode}, timeout=60)
        client, server = [], []
        for text in queries:
            started = time.perf_counter()
            reply = http.post(f"{url}/api/v1/search", json={"query": text, "mode": mode}, timeout=60).json()
            client.append((time.perf_counter() - started) * 1000)
            server.append(float(reply["took_ms"]))
            if reply["mode"] != mode:
                raise SystemExit(f"asked for {mode}, got {reply['mode']}")
        results[mode] = {"p50_ms": round(percentile(client, 0.5), 2), "p95_ms": round(percentile(client, 0.95), 2),
                         "server_p95_ms": round(percentile(server, 0.95), 2)}
        progress(f"  {mode}: p50 {results[mode]['p50_ms']} ms, p95 {results[mode]['p95_ms']} ms")
    return results


def recall_at_10(data: Path, queries: Sequence[str], embed: Any) -> float:
    """The engine's vector index as it saved it at stop, searched as the engine searches it (the graph above
    the exact-search threshold), against exact cosine top 10 over the stored float32 vectors, with the same
    query vector for both."""
    from kb_bridge.local_engine.store.vector_index import VectorIndex, saved_manifest

    conn = sqlite3.connect(data / "engine.sqlite3")
    ids, blobs = zip(*conn.execute("SELECT chunk_id, vector FROM embeddings"), strict=True)
    conn.close()
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(ids), -1)
    chunk_ids = np.asarray(ids)
    path = data / "indexes" / "vectors.usearch"
    manifest = saved_manifest(path)
    index = VectorIndex.restore(path, {"database": manifest["database"], "model": manifest["model"]}, matrix.shape[1])
    if index is None:
        raise SystemExit(f"no saved vector index under {data}")
    overlap = 0
    for text in queries:
        query = embed(text)
        exact = set(chunk_ids[np.argpartition(-(matrix @ query), 10)[:10]].tolist())
        overlap += len(exact & {chunk_id for chunk_id, _ in index.search(query, 10)})
    return overlap / (10 * len(queries))


def fts_side_by_side(data: Path, queries: Sequence[str]) -> dict[str, Any]:
    """The same queries on tantivy (the engine's index, opened read-only here) and on an FTS5 table of the
    same chunks, top 100 as hybrid asks (in process, no HTTP)."""
    from kb_bridge.local_engine.store.text_index import TextIndex

    fts_path = data.parent / f"{data.name}-fts5.sqlite3"
    if not fts_path.exists():
        progress("  building the FTS5 table")
        source = sqlite3.connect(data / "engine.sqlite3")
        target = sqlite3.connect(fts_path)
        target.execute("CREATE VIRTUAL TABLE f USING fts5(title, text, tokenize='porter unicode61 remove_diacritics 2')")
        cursor = source.execute("SELECT id, title, text FROM chunks")
        while rows := cursor.fetchmany(50_000):
            target.executemany("INSERT INTO f(rowid, title, text) VALUES (?, ?, ?)", rows)
        target.commit()
        target.close()
        source.close()
    conn = sqlite3.connect(fts_path)
    epoch = sqlite3.connect(data / "engine.sqlite3").execute("SELECT value FROM meta WHERE key = 'index_epoch'").fetchone()[0]
    text = TextIndex(data / "indexes" / "text", epoch)
    timings: dict[str, list[float]] = {"tantivy": [], "fts5": []}
    for query in queries:
        expression = " OR ".join(f'"{word}"' for word in query_words(query))
        started = time.perf_counter()
        text.search(query, DocumentFilter(), 100)
        timings["tantivy"].append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        conn.execute("SELECT rowid, bm25(f, 2.0, 1.0) AS s FROM f WHERE f MATCH ? ORDER BY s LIMIT 100",
                     (expression,)).fetchall()
        timings["fts5"].append((time.perf_counter() - started) * 1000)
    text.close()
    conn.close()
    return {name: {"p50_ms": round(percentile(values, 0.5), 2), "p95_ms": round(percentile(values, 0.95), 2)}
            for name, values in timings.items()}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    tiers = [int(t) for t in args.tiers.split(",")]
    root = args.data_root or Path(tempfile.mkdtemp(prefix="search-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="search-scale-logs-"))
    _, query_map = load_beir(args.corpus)
    queries = list(query_map.values())[: args.queries]
    corpus_dir = root / "tier-corpus"
    if not (args.keep and (corpus_dir / COMPLETE).exists()):
        progress("tier corpus: uploading SciFact through the API")
        build_corpus_tier(corpus_dir, corpus_files(args.corpus, args.documents), workdir)
    chunks, vectors = corpus_rows(corpus_dir)
    synthesiser = Synthesiser(chunks, vectors, args.noise)

    from kb_bridge.local_engine.embedding.embedder import bundled_model_dir, load_sentence_transformer

    model = load_sentence_transformer(bundled_model_dir(), "cpu")

    def embed(text: str) -> np.ndarray:
        return np.asarray(model.encode([text], normalize_embeddings=True)[0], dtype=np.float32)

    rows = []
    for tier in tiers:
        data = corpus_dir if tier <= len(chunks) else root / f"tier-{tier}"
        if data != corpus_dir and not (args.keep and (data / COMPLETE).exists()):
            progress(f"tier {tier}: writing synthetic chunks through the store")
            grow_tier(corpus_dir, data, tier, synthesiser)
        progress(f"tier {tier}: starting the engine (it builds or restores the vector index)")
        started = time.monotonic()
        engine = start_engine(workdir, data, ENGINE_ENV)
        try:
            http = requests.Session()
            status = wait_drained(http, engine.url, 1)
            row: dict[str, Any] = {"tier": tier, "chunks": status["chunks"], "vectors": status["vectors"],
                                   "indexes": status.get("indexes"), "start_seconds": round(time.monotonic() - started, 1)}
            row["modes"] = measure_modes(engine.url, queries)
            row["rss_mib"] = round(engine_rss_mib(engine), 1)
        finally:
            engine.stop()  # a clean stop saves the vector index
        row["recall_at_10"] = round(recall_at_10(data, queries[: args.recall_queries], embed), 4)
        progress(f"  recall@10 {row['recall_at_10']}, RSS {row['rss_mib']} MiB")
        if args.fts5:
            row["fts_in_process"] = fts_side_by_side(data, queries)
            progress(f"  in process: {json.dumps(row['fts_in_process'])}")
        rows.append(row)
    path = write_result("search-scale", {"tiers": rows, "queries": len(queries), "noise": args.noise})
    print(f"{'chunks':>9} {'mode':>7} {'p50 ms':>7} {'p95 ms':>7} {'srv p95':>8} {'recall@10':>9} {'RSS MiB':>8}")
    for row in rows:
        for mode in MODES:
            figures = row["modes"][mode]
            print(f"{row['chunks']:>9} {mode:>7} {figures['p50_ms']:>7} {figures['p95_ms']:>7} "
                  f"{figures['server_p95_ms']:>8} {row['recall_at_10'] if mode == 'vector' else '':>9} "
                  f"{row['rss_mib'] if mode == 'fts' else '':>8}")
        if "fts_in_process" in row:
            print(f"{'':>9} in process, top 100: tantivy {row['fts_in_process']['tantivy']}, "
                  f"fts5 {row['fts_in_process']['fts5']}")
    print(f"results: {path}")
    if not args.keep and args.data_root is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
