"""int8 weights on the ONNX runtime: kept only where the calibration at load finds every calibration text's
vector within a cosine of 0.99 of float32's (and int8 faster), float32 otherwise; the int8 vectors agree
with the model on torch in float32, in both forms (smoothed, blockwise); the form follows the CPU; torch
refuses int8.
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
from kb_bridge.local_engine.embedding.onnx_graph import build_model
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


def test_columns_of_8_bits_dequantise_to_the_weight_within_half_a_step() -> None:
    weight = np.random.default_rng(4).normal(size=(256, 24)).astype(np.float32)
    values, scales = onnx_int8.columnwise_8bit(weight)
    assert values.shape == (256, 24) and values.dtype == np.int8 and scales.shape == (24,)
    assert np.all(np.abs(values.astype(np.float32) * scales - weight) <= scales / 2 + 1e-6)
    assert np.abs(values).max() == 127  # each column's largest weight uses the whole range


@pytest.mark.parametrize(("machine", "flags", "form"), [
    ("x86_64", {"avx2", "avx512f", "avx512_vnni"}, "smoothed"),
    ("x86_64", {"avx2", "avx_vnni"}, "smoothed"),  # AVX-VNNI without AVX-512 (Alder Lake and later)
    ("AMD64", {"avx512_vnni"}, "smoothed"),
    ("x86_64", {"avx2", "avx512f", "avx512bw"}, "blockwise"),  # AVX-512 without VNNI (Skylake-SP)
    ("x86_64", set(), "blockwise"),  # flags unknown (no /proc/cpuinfo)
    ("aarch64", set(), "smoothed"),
    ("arm64", set(), "smoothed"),
    ("ppc64le", {"avx512_vnni"}, "blockwise"),  # an x86 flag name means nothing elsewhere
])
def test_the_int8_form_follows_the_cpus_8_bit_dot_products(machine: str, flags: set[str], form: str) -> None:
    """Selection logic only: this machine has one CPU (docs/engine.md says so)."""
    assert onnx_int8.form_for_cpu(machine, frozenset(flags)) == form


@needs_model
def test_the_smoothed_form_divides_each_input_once_and_keeps_the_product(model_dir: Path) -> None:
    """One Mul per smoothed input (Q, K and V share theirs), every dense layer a DynamicQuantizeMatMul but
    the feed-forward output ones (MatMulNBits), and (x / s)·(W·s) is x·W: the smoothing alone, without the
    8 bits, changes no output."""
    model = build_model(model_dir)
    ranges = onnx_int8.load_ranges(model_dir)
    assert ranges is not None and len(ranges) == 6 * 6
    smoothed = onnx_int8.quantised(model, "smoothed", ranges)
    operators = [node.op_type for node in smoothed.graph.nodes]
    assert operators.count("DynamicQuantizeMatMul") == 5 * 6 and operators.count("MatMulNBits") == 6
    feed_forward_outputs = [node.inputs[1].removesuffix(".q8") for node in smoothed.graph.nodes
                            if node.op_type == "MatMulNBits"]
    assert all(onnx_int8.is_feed_forward_output(name) for name in feed_forward_outputs)
    dense = [node for node in model.graph.nodes if node.op_type == "MatMul" and node.inputs[1] in ranges
             and not onnx_int8.is_feed_forward_output(node.inputs[1])]
    assert operators.count("Mul") - [node.op_type for node in model.graph.nodes].count("Mul") == \
        len({node.inputs[0] for node in dense}) == 3 * 6
    weights = {tensor.name: tensor.array for tensor in model.graph.initializers}
    factors = onnx_int8._smoothing(dense, weights, ranges)
    generator = np.random.default_rng(5)
    for node in dense[:5]:  # a layer's five: Q, K, V, the attention's output, the first feed-forward layer
        s = factors[node.inputs[0]]
        weight = weights[node.inputs[1]]
        x = generator.normal(size=(7, weight.shape[0])).astype(np.float32)
        assert not np.allclose(s, 1.0)  # a real smoothing, not a no-op
        assert np.allclose((x / s) @ (weight * s[:, None]), x @ weight, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="activation_ranges.safetensors has no range for"):
        onnx_int8.quantised(model, "smoothed", {})


@needs_model
@pytest.mark.parametrize("form", onnx_int8.FORMS)
def test_int8_vectors_agree_with_torch_float32_per_text(model_dir: Path, form: str) -> None:
    if form == "smoothed" and onnx_int8.cpu_form() != "smoothed":
        # Built only where the CPU has 8-bit dot products: elsewhere the integer GEMM's 16-bit sums saturate
        # (onnx_int8.py; lowest cosine 0.975 on an AMD EPYC without VNNI), and the engine builds the blockwise form.
        pytest.skip("the smoothed int8 form is for CPUs with 8-bit dot products (VNNI, ARM); this one has none")
    expected = original_torch_model().encode(  # the original float32 weights, not the bundled float16 ones
        TEXTS, batch_size=16, normalize_embeddings=True, convert_to_numpy=True)
    embedder = OnnxEmbedder(model_dir, "all-MiniLM-L6-v2", document_precision="int8", query_precision="int8",
                            int8_form=form)
    assert (embedder.document_precision, embedder.query_precision, embedder.int8_form) == ("int8", "int8", form)
    assert embedder.document_format == ("int8-smoothed" if form == "smoothed" else "int8")
    assert MIN_COSINE <= embedder.document_agreement < 1.0
    documents = embedder.embed_documents(TEXTS)
    queries = np.stack([embedder.embed_query(text) for text in TEXTS])
    for vectors in (documents, queries):
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        cosines = np.sum(vectors * expected, axis=1)
        assert cosines.min() >= MIN_COSINE, dict(zip(TEXTS, cosines.round(5).tolist(), strict=True))


@needs_model
@pytest.mark.parametrize("form", onnx_int8.FORMS)
def test_a_texts_int8_vector_does_not_depend_on_the_texts_embedded_with_it(model_dir: Path, form: str) -> None:
    """Both forms take their input's scales across a call (the smoothed one a single scale for all of it), so
    a text run in one call with others took their range (cosine 0.9987 to itself alone in the smoothed form,
    0.99992 in the blockwise one): the same note stored twice got two vectors."""
    embedder = OnnxEmbedder(model_dir, "all-MiniLM-L6-v2", document_precision="int8", query_precision="int8",
                            int8_form=form, batch_size=16)
    together = embedder.embed_documents(TEXTS * 3)
    alone = np.stack([embedder.embed_documents([text])[0] for text in TEXTS])
    for copy in range(3):
        block = together[copy * len(TEXTS):(copy + 1) * len(TEXTS)]
        assert np.abs(block - alone).max() < 1e-5, np.sum(block * alone, axis=1).round(6).tolist()
    assert np.abs(np.stack([embedder.embed_query(text) for text in TEXTS]) - alone).max() < 1e-5


@needs_model
@pytest.mark.parametrize(("form", "quantiser"), [("blockwise", "blockwise_8bit"), ("smoothed", "columnwise_8bit")])
def test_auto_falls_back_to_float32_when_int8_moves_a_vector_too_far(model_dir: Path, form: str, quantiser: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A quantisation made bad on purpose (every other scale off by 40 %): auto keeps float32."""
    real = getattr(onnx_int8, quantiser)

    def damaged(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        values, scales = real(weight)
        scales[::2] *= 1.4
        return values, scales

    monkeypatch.setattr(onnx_int8, quantiser, damaged)
    embedder = OnnxEmbedder(model_dir, "all-MiniLM-L6-v2", int8_form=form)
    assert (embedder.document_precision, embedder.query_precision) == ("float32", "float32")
    assert embedder.document_agreement == embedder.query_agreement == 1.0
    forced: Any = OnnxEmbedder(model_dir, "all-MiniLM-L6-v2", document_precision="int8", query_precision="float32",
                               int8_form=form)
    assert forced.document_precision == "int8" and forced.document_agreement < MIN_COSINE
    assert forced.query_precision == "float32" and forced.query_agreement == 1.0


@needs_model
def test_a_model_folder_without_activation_ranges_gets_the_blockwise_form(model_dir: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The smoothed form needs the ranges file; a folder without it (another copy of the model) still gets
    int8, in the form that needs none, on this machine whatever its CPU."""
    for entry in model_dir.iterdir():
        if entry.name != onnx_int8.RANGES_FILE:
            (tmp_path / entry.name).symlink_to(entry)
    monkeypatch.setattr(onnx_int8, "cpu_form", lambda: "smoothed")
    embedder = OnnxEmbedder(tmp_path, "all-MiniLM-L6-v2", document_precision="int8", query_precision="int8")
    assert (embedder.int8_form, embedder.document_format) == ("blockwise", "int8")
    with_ranges = OnnxEmbedder(model_dir, "all-MiniLM-L6-v2", document_precision="int8", query_precision="int8")
    assert (with_ranges.int8_form, with_ranges.document_format) == ("smoothed", "int8-smoothed")
