"""Writes the bundled model's activation ranges (kb_bridge/local_engine/embedding/model/activation_ranges.safetensors):
for every dense layer, the largest absolute value each of its input channels takes over a fixed set of
texts, which the engine's smoothed int8 form divides out of its inputs (embedding/onnx_int8.py). Not a
benchmark: the tool that made the file, kept so that anyone can make it again and compare.

The texts are this repository's own documentation, not any benchmark's (SciFact and LoCoMo measure what the
form does, so they must not shape it): `--passages` 1,000-character passages of README.md and docs/*.md
and `--sentences` sentences of README.md (to cover query-sized inputs), drawn with a fixed seed, plus the
calibration texts of embedding/onnx_precision.py. The float32 graph (onnx_graph.py) runs them 16 at a time
with every dense layer's input exposed as an output. Padding positions count in the maxima: they are part
of the tensor each call quantises, and leaving them out made the form's vectors worse (lowest cosine to
float32 over 300 SciFact chunks 0.986 instead of 0.994). The file's metadata records the texts' SHA-256,
their count and the checkout's commit.

    python bench/activation_ranges.py            # rewrites the file
    python bench/activation_ranges.py --check    # compares a fresh measurement with the file, writes nothing
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
MODEL_DIR = REPO / "kb_bridge" / "local_engine" / "embedding" / "model"
BATCH = 16


def fit_texts(passages: int, sentences: int, seed: int) -> list[str]:
    from kb_bridge.local_engine.embedding.onnx_precision import DOCUMENT_TEXTS, QUERY_TEXTS

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    documents = [readme] + [path.read_text(encoding="utf-8") for path in sorted((REPO / "docs").glob("*.md"))]
    pieces = [text[start : start + 1000] for text in documents for start in range(0, len(text), 1000)]
    lines = [line.strip() for line in re.split(r"(?<=[.?!])\s+", readme) if 20 < len(line.strip()) < 200]
    generator = np.random.default_rng(seed)
    chosen = [pieces[i] for i in sorted(generator.choice(len(pieces), min(passages, len(pieces)), replace=False))]
    chosen += [lines[i] for i in sorted(generator.choice(len(lines), min(sentences, len(lines)), replace=False))]
    return chosen + list(QUERY_TEXTS) + list(DOCUMENT_TEXTS)


def measure(texts: Sequence[str]) -> dict[str, np.ndarray]:
    """Every dense weight's name -> the largest |value| of each channel of its input over `texts`."""
    import onnxruntime

    from kb_bridge.local_engine.embedding.onnx_graph import ATTENTION_MASK, INPUT_IDS, build_model
    from kb_bridge.local_engine.embedding.onnx_int8 import BLOCK
    from kb_bridge.local_engine.embedding.onnx_proto import FLOAT, ValueInfo
    from kb_bridge.local_engine.embedding.tokens import load_tokenizer, padded, token_ids

    model = build_model(MODEL_DIR)
    weights = {tensor.name: tensor.array for tensor in model.graph.initializers}
    inputs = {node.inputs[1]: node.inputs[0] for node in model.graph.nodes
              if node.op_type == "MatMul" and node.inputs[1] in weights and weights[node.inputs[1]].ndim == 2
              and weights[node.inputs[1]].shape[0] % BLOCK == 0}
    exposed = sorted(set(inputs.values()))
    graph = dataclasses.replace(model.graph, outputs=model.graph.outputs + tuple(
        ValueInfo(name, FLOAT, ("batch", "sequence", f"{name}_width")) for name in exposed))
    session = onnxruntime.InferenceSession(dataclasses.replace(model, graph=graph).serialized(),
                                           providers=["CPUExecutionProvider"])
    tokenizer = load_tokenizer(MODEL_DIR)
    ids = token_ids(tokenizer, texts)
    maxima: dict[str, np.ndarray] = {}
    for start in range(0, len(ids), BATCH):
        input_ids, mask = padded(ids[start : start + BATCH])
        outputs = session.run(exposed, {INPUT_IDS: input_ids, ATTENTION_MASK: mask})
        for name, values in zip(exposed, outputs, strict=True):
            kept = np.abs(values.reshape(-1, values.shape[-1]))  # every position, padding too (above)
            maxima[name] = np.maximum(maxima.get(name, 0), kept.max(axis=0))
    return {weight: maxima[source].astype(np.float32) for weight, source in sorted(inputs.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=64)
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--check", action="store_true", help="compare with the file; write nothing")
    args = parser.parse_args()
    from safetensors.numpy import load_file, save_file

    from kb_bridge.local_engine.embedding.onnx_int8 import RANGES_FILE

    texts = fit_texts(args.passages, args.sentences, args.seed)
    ranges = measure(texts)
    target = MODEL_DIR / RANGES_FILE
    if args.check:
        stored = load_file(str(target))
        worst = max(float(np.max(np.abs(stored[name] / ranges[name] - 1))) for name in ranges)
        print(f"{len(ranges)} layers; largest relative difference from {target.name}: {worst:.4f}")
        return
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    digest = hashlib.sha256("\x00".join(texts).encode("utf-8")).hexdigest()
    save_file(ranges, str(target), metadata={"texts": str(len(texts)), "texts_sha256": digest, "commit": commit,
                                             "made_by": "bench/activation_ranges.py"})
    print(f"wrote {target} ({len(ranges)} layers, {len(texts)} texts, sha256 {digest[:12]}…, at {commit})")


if __name__ == "__main__":
    main()
