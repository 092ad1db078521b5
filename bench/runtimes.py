"""The embedding runtimes and number formats side by side: ONNX Runtime (the default on a CPU) in its calibrated
format (int8 where it keeps the vectors) and in float32, against sentence-transformers on torch in float32
and in its calibrated format (bfloat16 where faster), as the engine runs each (embedding/onnx_embedder.py,
embedding/embedder.py). Not a test.

Each runtime lives in a process of its own (so that its resident memory is its own, and neither imports the
other's libraries); the parent hands out rounds in turn, so that other load on a shared machine hits every
runtime alike. Per runtime:

- **documents**: chunks/s (and chunks per CPU-second of the process, the fairer figure on a machine busy
  with other work, where wall-clock rates mostly measure each process's share of the cores) embedding `--chunks` SciFact chunks as the engine makes them (title, blank line,
  ~1,000-character chunk), through `embed_documents` in calls of 16 texts sorted by length (as the
  ingestion worker sends them), all copies of the model at work; the median of `--rounds` rounds;
- **queries**: `embed_query` p50 and p95 over SciFact claims (one sentence each);
- **memory**: VmRSS once loaded, and after the rounds.

    python bench/runtimes.py                          # onnx auto and float32, torch float32 and auto: 4 minutes
    python bench/runtimes.py --runtimes onnx torch-float32 --rounds 5

The summary ends with each runtime's rate and query p50 as a ratio to torch float32's and torch auto's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from common import SCIFACT, WORKER_BATCH, load_beir, progress, summary_ms, vm_rss_kib, write_result
from ingestion import corpus_files, embedding_inputs

RUNTIMES = {  # name: (runtime, precision, ONNX int8 form or None for the one the CPU gets)
    "onnx": ("onnx", "auto", None),  # int8 where it keeps the vectors and is faster (embedding/onnx_precision.py)
    "onnx-float32": ("onnx", "float32", None),
    "onnx-blockwise": ("onnx", "int8", "blockwise"),  # int8's other form (embedding/onnx_int8.py)
    "torch-float32": ("torch", "float32", None),
    "torch-auto": ("torch", "auto", None),  # bfloat16 where this CPU runs it faster (embedding/precision.py)
}
DEFAULT_RUNTIMES = ["onnx", "onnx-float32", "torch-float32", "torch-auto"]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtimes", nargs="+", choices=list(RUNTIMES), default=DEFAULT_RUNTIMES)
    parser.add_argument("--chunks", type=int, default=200, help="chunks embedded per round (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per runtime (default 3)")
    parser.add_argument("--queries", type=int, default=200, help="queries timed per runtime (default 200)")
    parser.add_argument("--child", choices=list(RUNTIMES), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def texts(chunks: int, queries: int) -> tuple[list[str], list[str]]:
    documents = embedding_inputs(corpus_files(SCIFACT, chunks))[:chunks]
    _, claims = load_beir(SCIFACT)
    return documents, list(claims.values())[:queries]


# --- a child: one runtime, answering the parent's commands on stdin ---------------------------------------------


def child(name: str, chunks: int, queries: int) -> None:
    import os

    from kb_bridge.local_engine.embedding.embedder import bundled_model_dir, make_embedder

    runtime, precision, int8_form = RUNTIMES[name]
    documents, claims = texts(chunks, queries)
    documents.sort(key=len)
    started = time.perf_counter()
    model_dir = bundled_model_dir()
    assert model_dir is not None, "the model is not installed: pip install 'kb-bridge[engine]'"
    if int8_form is None:
        embedder = make_embedder(runtime, model_dir, batch_size=WORKER_BATCH, query_precision=precision,
                                 query_threads=1, device="cpu", document_precision=precision, document_workers=0)
    else:  # a form the CPU would not get by itself: the ONNX embedder asked for it
        from kb_bridge.local_engine.embedding.embedder import MODEL_NAME
        from kb_bridge.local_engine.embedding.onnx_embedder import OnnxEmbedder

        embedder = OnnxEmbedder(model_dir, MODEL_NAME, batch_size=WORKER_BATCH, query_precision=precision,
                                document_precision=precision, int8_form=int8_form)
    reply({"loaded_s": round(time.perf_counter() - started, 2), "rss_mib": vm_rss_kib(os.getpid()) // 1024,
           "int8_form": getattr(embedder, "int8_form", None),
           "precision": {"documents": getattr(embedder, "document_precision", precision),
                         "queries": getattr(embedder, "query_precision", precision)},
           "workers": getattr(embedder, "document_workers", 1)})
    embedder.embed_documents(documents[:WORKER_BATCH])  # warm-up, not timed
    for command in sys.stdin:
        if command.strip() == "documents":
            started, cpu = time.perf_counter(), time.process_time()
            for start in range(0, len(documents), WORKER_BATCH):
                embedder.embed_documents(documents[start : start + WORKER_BATCH])
            reply({"chunks_per_s": round(len(documents) / (time.perf_counter() - started), 2),
                   "chunks_per_cpu_s": round(len(documents) / (time.process_time() - cpu), 2)})
        elif command.strip() == "queries":
            timings = []
            for claim in claims:
                started = time.perf_counter()
                embedder.embed_query(claim)
                timings.append(time.perf_counter() - started)
            reply({"query_ms": summary_ms(timings), "rss_mib": vm_rss_kib(os.getpid()) // 1024})


def reply(payload: dict[str, Any]) -> None:
    print(json.dumps(payload), flush=True)


# --- the parent ------------------------------------------------------------------------------------------------


class Child:
    def __init__(self, name: str, args: argparse.Namespace) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--child", name, "--chunks", str(args.chunks), "--queries", str(args.queries)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self.loaded = self.read()
        progress(f"{name}: loaded in {self.loaded['loaded_s']} s, {self.loaded['rss_mib']} MiB")

    def ask(self, command: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read()

    def read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"the {self.name} process exited (code {self.process.wait()})")
        return dict(json.loads(line))

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(60)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        child(args.child, args.chunks, args.queries)
        return
    children = [Child(name, args) for name in args.runtimes]
    rates: dict[str, list[float]] = {child.name: [] for child in children}
    cpu_rates: dict[str, list[float]] = {child.name: [] for child in children}
    try:
        for round_ in range(args.rounds):
            for child_ in children[round_ % len(children):] + children[: round_ % len(children)]:
                answer = child_.ask("documents")
                rates[child_.name].append(answer["chunks_per_s"])
                cpu_rates[child_.name].append(answer["chunks_per_cpu_s"])
                progress(f"round {round_ + 1} {child_.name}: {answer['chunks_per_s']} chunks/s, "
                         f"{answer['chunks_per_cpu_s']} per CPU-second")
        queries = {child_.name: child_.ask("queries") for child_ in children}
    finally:
        for child_ in children:
            child_.close()
    results = {
        child_.name: {**child_.loaded, "loaded_rss_mib": child_.loaded.pop("rss_mib"),
                      "chunks_per_s": rates[child_.name], "median_chunks_per_s": statistics.median(rates[child_.name]),
                      "median_chunks_per_cpu_s": statistics.median(cpu_rates[child_.name]),
                      "query_ms": queries[child_.name]["query_ms"], "final_rss_mib": queries[child_.name]["rss_mib"]}
        for child_ in children
    }
    for name, result in results.items():
        print(f"{name:14} {result['median_chunks_per_s']:7.1f} chunks/s (median of {args.rounds}), "
              f"{result['median_chunks_per_cpu_s']:5.1f} per CPU-second  "
              f"query p50 {result['query_ms']['p50']:6.2f} ms p95 {result['query_ms']['p95']:6.2f} ms  "
              f"RSS {result['loaded_rss_mib']} MiB loaded, {result['final_rss_mib']} MiB after  "
              f"load {result['loaded_s']} s  {result['precision']}")
    for base in ("torch-float32", "torch-auto"):
        if base in results:
            reference = results[base]
            print(f"against {base}: " + ", ".join(
                f"{name} x{result['median_chunks_per_s'] / reference['median_chunks_per_s']:.2f} chunks/s, "
                f"x{result['median_chunks_per_cpu_s'] / reference['median_chunks_per_cpu_s']:.2f} per CPU-second, "
                f"x{result['query_ms']['p50'] / reference['query_ms']['p50']:.2f} query p50"
                for name, result in results.items()))
    path = write_result("runtimes", {"chunks": args.chunks, "rounds": args.rounds, "batch": WORKER_BATCH,
                                     "results": results})
    progress(f"written to {path}")


if __name__ == "__main__":
    main()
