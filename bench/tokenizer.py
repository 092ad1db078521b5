"""The engine's pure-Python tokenizer (embedding/wordpiece.py) beside the `tokenizers` library, side by side in
one run. Not a test.

Inputs are SciFact's chunks as the engine makes them (bench/ingestion.py's embedding_inputs: .txt chunking at
1,000 characters, the title in front) and its claims (one-sentence queries). Each tokenizer is timed per text,
alternating text by text so that a change in the machine's load falls on both alike:
- uncached: every chunk with wordpiece.py's word cache emptied first (the worst case: no word seen before);
- cold: a fresh tokenizer's first pass over the chunks (the word cache fills as it goes);
- warm: the same chunks again, and the claims (the cache holds the corpus's words, as it would in an engine
  that has ingested for a while).
Every text's ids are compared too, and the run stops if one differs.

    python bench/tokenizer.py                # all 5,183 SciFact documents' chunks and 1,109 claims
    python bench/tokenizer.py --documents 500
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from common import SCIFACT, load_beir, machine, progress, write_result
from kb_bridge.local_engine.embedding.embedder import bundled_model_dir
from kb_bridge.local_engine.embedding.tokens import load_tokenizer, max_seq_length
from kb_bridge.local_engine.ingest.chunking import ChunkingPolicy, chunk_text, embedding_input


def chunks_and_claims(corpus: Path, documents: int) -> tuple[list[str], list[str]]:
    rows, queries = load_beir(corpus)
    policy = ChunkingPolicy(max_chars=1000, overlap=150)  # the engine's default, as bench/ingestion.py uses
    chunks = [embedding_input(row.get("title") or str(row["_id"]), chunk)
              for row in rows[:documents] if row.get("text", "").strip()
              for chunk in chunk_text(row["text"], "txt", policy)]
    return chunks, list(queries.values())


def timed_side_by_side(texts: Sequence[str], encoders: dict[str, Callable[[str], list[int]]]) -> dict[str, list[float]]:
    """Seconds per text for each encoder, one text at a time through each in turn; the ids must agree."""
    seconds: dict[str, list[float]] = {name: [] for name in encoders}
    for text in texts:
        seen = []
        for name, encode in encoders.items():
            started = time.perf_counter()
            ids = encode(text)
            seconds[name].append(time.perf_counter() - started)
            seen.append(ids)
        if any(ids != seen[0] for ids in seen):
            raise SystemExit(f"the tokenizers disagree on {text[:200]!r}")
    return seconds


def summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {"median_ms": round(statistics.median(ordered) * 1000, 4),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 4),
            "mean_ms": round(statistics.fmean(ordered) * 1000, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=SCIFACT)
    parser.add_argument("--documents", type=int, default=10**9)
    args = parser.parse_args()
    model_dir = bundled_model_dir()
    if model_dir is None:
        raise SystemExit("the bundled model is missing")
    from tokenizers import Tokenizer  # the `test` extra's reference

    reference = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    reference.enable_truncation(max_length=max_seq_length(model_dir))
    reference.no_padding()
    started = time.perf_counter()
    ours = load_tokenizer(model_dir)
    load_ms = (time.perf_counter() - started) * 1000
    encoders: dict[str, Callable[[str], list[int]]] = {"wordpiece.py": ours.encode,
                                                       "tokenizers": lambda text: reference.encode(text).ids}
    chunks, claims = chunks_and_claims(args.corpus, args.documents)

    def uncached(text: str) -> list[int]:
        ours._cache.clear()
        return ours.encode(text)

    progress(f"{len(chunks)} chunks (mean {statistics.fmean(map(len, chunks)):.0f} characters), {len(claims)} claims")
    results: dict[str, Any] = {"load_ms": {"wordpiece.py": round(load_ms, 1)},
                               "chunks": len(chunks), "mean_chunk_chars": round(statistics.fmean(map(len, chunks))),
                               "claims": len(claims)}
    runs = (("chunks uncached", chunks, {**encoders, "wordpiece.py": uncached}), ("chunks cold", chunks, encoders),
            ("chunks warm", chunks, encoders), ("claims warm", claims, encoders))
    for label, texts, timed in runs:
        seconds = timed_side_by_side(texts, timed)
        results[label] = {name: summary(values) for name, values in seconds.items()}
        ratio = statistics.median(seconds["wordpiece.py"]) / statistics.median(seconds["tokenizers"])
        results[label]["median_ratio"] = round(ratio, 3)
        print(f"{label:15} median ms: wordpiece.py {results[label]['wordpiece.py']['median_ms']:.3f}, "
              f"tokenizers {results[label]['tokenizers']['median_ms']:.3f} (ratio {ratio:.2f}); p95 "
              f"{results[label]['wordpiece.py']['p95_ms']:.3f} and {results[label]['tokenizers']['p95_ms']:.3f}")
    print(f"load: wordpiece.py {load_ms:.0f} ms; all ids identical; load average {machine()['load_average']}")
    print(f"written to {write_result('tokenizer', results)}")


if __name__ == "__main__":
    main()
