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
    python bench/activation_ranges.py --check    # measures again from the texts of the commit the file records
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

from common import WORKER_BATCH

REPO = Path(__file__).resolve().parent.parent
MODEL_DIR = REPO / "kb_bridge" / "local_engine" / "embedding" / "model"


def documentation(ref: str | None) -> list[str]:
    """README.md, then docs/*.md by name: as the working tree has them, or as commit `ref` had them (the
    documentation changes, so a file made at one commit is measured again from that commit's texts)."""
    if ref is None:
        return [(REPO / "README.md").read_text(encoding="utf-8")] + \
            [path.read_text(encoding="utf-8") for path in sorted((REPO / "docs").glob("*.md"))]

    def git(*arguments: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *arguments], capture_output=True, text=True,
                              check=True).stdout

    names = sorted(name for name in git("ls-tree", "--name-only", ref, "docs/").split()
                   if name.endswith(".md") and name.count("/") == 1)
    return [git("show", f"{ref}:README.md")] + [git("show", f"{ref}:{name}") for name in names]


def fit_texts(passages: int, sentences: int, seed: int, ref: str | None = None) -> list[str]:
    from kb_bridge.local_engine.embedding.onnx_precision import DOCUMENT_TEXTS, QUERY_TEXTS

    documents = documentation(ref)
    readme = documents[0]
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
    from kb_bridge.local_engine.embedding.onnx_int8 import dense_weight
    from kb_bridge.local_engine.embedding.onnx_proto import FLOAT, ValueInfo
    from kb_bridge.local_engine.embedding.tokens import load_tokenizer, padded, token_ids

    model = build_model(MODEL_DIR)
    weights = {tensor.name: tensor.array for tensor in model.graph.initializers}
    inputs = {node.inputs[1]: node.inputs[0] for node in model.graph.nodes if dense_weight(node, weights) is not None}
    exposed = sorted(set(inputs.values()))
    graph = dataclasses.replace(model.graph, outputs=model.graph.outputs + tuple(
        ValueInfo(name, FLOAT, ("batch", "sequence", f"{name}_width")) for name in exposed))
    session = onnxruntime.InferenceSession(dataclasses.replace(model, graph=graph).serialized(),
                                           providers=["CPUExecutionProvider"])
    tokenizer = load_tokenizer(MODEL_DIR)
    ids = token_ids(tokenizer, texts)
    maxima: dict[str, np.ndarray] = {}
    for start in range(0, len(ids), WORKER_BATCH):
        input_ids, mask = padded(ids[start : start + WORKER_BATCH])
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
    parser.add_argument("--check", action="store_true",
                        help="measure again from the texts of the commit the file names; compare; write nothing")
    parser.add_argument("--ref", help="read README.md and docs/ as this commit has them (default: the working "
                                      "tree; with --check, the commit recorded in the file)")
    args = parser.parse_args()
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    from kb_bridge.local_engine.embedding.onnx_int8 import RANGES_FILE

    target = MODEL_DIR / RANGES_FILE
    recorded: dict[str, str] = {}
    if args.check:
        with safe_open(str(target), framework="numpy") as stored_file:
            recorded = stored_file.metadata() or {}
    ref = args.ref or (recorded.get("commit") if args.check else None)
    texts = fit_texts(args.passages, args.sentences, args.seed, ref)
    digest = hashlib.sha256("\x00".join(texts).encode("utf-8")).hexdigest()
    ranges = measure(texts)
    if args.check:
        stored = load_file(str(target))
        worst = max(float(np.max(np.abs(stored[name] / ranges[name] - 1))) for name in ranges)
        same = "the same texts" if digest == recorded.get("texts_sha256") else "OTHER texts than the file's"
        print(f"{len(ranges)} layers, {same} (at {ref}); largest relative difference from {target.name}: {worst:.4f}")
        return
    commit = ref or subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                                   text=True).stdout.strip()
    save_file(ranges, str(target), metadata={"texts": str(len(texts)), "texts_sha256": digest, "commit": commit,
                                             "made_by": "bench/activation_ranges.py"})
    print(f"wrote {target} ({len(ranges)} layers, {len(texts)} texts, sha256 {digest[:12]}…, at {commit})")


if __name__ == "__main__":
    main()
