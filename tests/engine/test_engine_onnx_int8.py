"""int8 weights on the ONNX runtime: kept only where the calibration at load finds every calibration text's
vector within a cosine of 0.99 of float32's (and int8 faster), float32 otherwise; the int8 vectors agree
with the model on torch in float32; torch refuses int8.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kb_bridge.local_engine.embedding import onnx_int8
from kb_bridge.local_engine.embedding.embedder import bundled_model_dir
from kb_bridge.local_engine.embedding.onnx_embedder import OnnxEmbedder
from kb_bridge.local_engine.embedding.onnx_precision import MIN_COSINE, Agreement, choose, onnx_precision
from kb_bridge.local_engine.embedding.precision import torch_precision
from kb_bridge.local_engine.embedding.runtime import installed_runtimes
from kb_bridge.local_engine.errors import ConfigError

from kb_bridge.testing.reference_model import original_torch_model

from .test_engine_onnx import TEXTS

needs_model = pytest.mark.skipif(bundled_model_dir() is None or not installed_runtimes().onnx,
                                 reason="needs the model and the ONNX runtime (kb-bridge[engine])")
FAST = dict(float32_ms=100.0, int8_ms=60.0)


@pytest.mark.parametrize(("agreement", "expected"), [
    (Agreement(cosine=0.995, **FAST), "int8"),
    (Agreement(cosine=MIN_COSINE, **FAST), "int8"),
    (Agreement(cosine=0.9899, **FAST), "float32"),  # one text too far from float32 is enough
    (Agreement(cosine=0.999, float32_ms=100.0, int8_ms=95.0), "float32"),  # not faster enough
])
def test_auto_keeps_int8_only_when_every_text_agrees_and_it_is_faster(agreement: Agreement, expected: str) -> None:
    assert choose("auto", agreement, "documents' model") == expected


def test_a_named_precision_is_taken_as_given() -> None:
    bad = Agreement(cosine=0.5, float32_ms=0.0, int8_ms=0.0)
    assert choose("int8", bad, "query model") == "int8"
    assert choose("float32", None, "query model") == "float32"


def test_precisions_are_checked_per_runtime() -> None:
    assert onnx_precision("int8", "KB_ENGINE_QUERY_PRECISION") == "int8"
    with pytest.raises(ConfigError, match="KB_ENGINE_QUERY_PRECISION=bfloat16 is for KB_ENGINE_RUNTIME=torch"):
        onnx_precision("bfloat16", "KB_ENGINE_QUERY_PRECISION")
    with pytest.raises(ConfigError, match="KB_ENGINE_DOCUMENT_PRECISION=int8 is for the ONNX runtime"):
        torch_precision("int8", "KB_ENGINE_DOCUMENT_PRECISION")


def test_blocks_of_8_bits_dequantise_to_the_weight_within_half_a_step() -> None:
    weight = np.random.default_rng(3).normal(size=(256, 24)).astype(np.float32)
    weight[5, 7] = 40.0  # an outlier costs precision in its own block only
    blocks, scales = onnx_int8.blockwise_8bit(weight)
    assert blocks.shape == (24, 256 // onnx_int8.BLOCK, onnx_int8.BLOCK) and blocks.dtype == np.uint8
    steps = scales.reshape(24, -1, 1)
    restored = ((blocks.astype(np.float32) - 128) * steps).reshape(24, 256).T
    assert np.all(np.abs(restored - weight) <= steps.reshape(24, -1).repeat(onnx_int8.BLOCK, axis=1).T / 2 + 1e-6)
    assert scales.reshape(24, -1)[7, 1] < 1.0  # the block without the outlier keeps its fine step


@pytest.fixture(scope="module")
def model_dir() -> Path:
    found = bundled_model_dir()
    assert found is not None
    return found


@needs_model
def test_int8_vectors_agree_with_torch_float32_per_text(model_dir: Path) -> None:
    expected = original_torch_model().encode(  # the original float32 weights, not the bundled float16 ones
        TEXTS, batch_size=16, normalize_embeddings=True, convert_to_numpy=True)
    embedder = OnnxEmbedder(model_dir, "all-MiniLM-L6-v2", document_precision="int8", query_precision="int8")
    assert (embedder.document_precision, embedder.query_precision) == ("int8", "int8")
    assert MIN_COSINE <= embedder.document_agreement < 1.0
    documents = embedder.embed_documents(TEXTS)
    queries = np.stack([embedder.embed_query(text) for text in TEXTS])
    for vectors in (documents, queries):
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        cosines = np.sum(vectors * expected, axis=1)
        assert cosines.min() >= MIN_COSINE, dict(zip(TEXTS, cosines.round(5).tolist(), strict=True))


@needs_model
def test_auto_falls_back_to_float32_when_int8_moves_a_vector_too_far(model_dir: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A quantisation made bad on purpose (every other block's scale off by 40 %): auto keeps float32."""
    real = onnx_int8.blockwise_8bit

    def damaged(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        blocks, scales = real(weight)
        scales[::2] *= 1.4
        return blocks, scales

    monkeypatch.setattr(onnx_int8, "blockwise_8bit", damaged)
    embedder = OnnxEmbedder(model_dir, "all-MiniLM-L6-v2")
    assert (embedder.document_precision, embedder.query_precision) == ("float32", "float32")
    assert embedder.document_agreement == embedder.query_agreement == 1.0
    forced: Any = OnnxEmbedder(model_dir, "all-MiniLM-L6-v2", document_precision="int8", query_precision="float32")
    assert forced.document_precision == "int8" and forced.document_agreement < MIN_COSINE
    assert forced.query_precision == "float32" and forced.query_agreement == 1.0
