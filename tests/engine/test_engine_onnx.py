"""The ONNX runtime's embedder: the graph written from the weights agrees with the model on torch, its
tokens are sentence-transformers' tokens, and its sessions are laid out as the torch embedder's copies are.

Where the comparison needs torch (the `test` extra installs it), it skips without it unless
KB_TEST_REQUIRE_ALL=1, which makes it a failure (CI).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kb_bridge.local_engine.embedding.document_pool import plan_workers, usable_cores
from kb_bridge.local_engine.embedding.embedder import Embedder, bundled_model_dir
from kb_bridge.local_engine.embedding.onnx_embedder import OnnxEmbedder
from kb_bridge.local_engine.embedding.onnx_graph import ATTENTION_MASK, INPUT_IDS, OUTPUT, BertShape, build_model
from kb_bridge.local_engine.embedding.runtime import installed_runtimes
from kb_bridge.local_engine.embedding.tokens import load_tokenizer, padded, token_ids
from kb_bridge.local_engine.embedding.wordpiece import WordPieceTokenizer
from kb_bridge.local_engine.errors import ConfigError
from kb_bridge.testing.reference_model import ORIGINAL_PACKAGE, original_torch_model

pytestmark = pytest.mark.skipif(bundled_model_dir() is None or not installed_runtimes().onnx,
                                reason="needs the model and the ONNX runtime (kb-bridge[engine])")

LONG = " ".join(f"Sentence {n} of a long chunk about vitamin D, respiratory infections and adults." for n in range(60))
# Short and long (beyond 256 tokens: truncation), non-ASCII, empty-ish, code, numbers, repetition.
TEXTS = [
    "time off after having a baby",
    "how do I rotate the API keys of the staging cluster?",
    "Vitamin D deficiency is associated with a higher risk of respiratory infections in adults.",
    "error ZX-4471 when the disk quota is exceeded",
    LONG,
    "Die Katze schläft auf dem Sofa, während draußen der Schnee fällt.",
    "東京の天気は明日晴れるでしょうか？",
    "Москва — столица России.",
    "مرحبا بالعالم",
    "café naïve résumé Ünïcödé 🚀✨",
    "",
    "   \n\t  ",
    "a",
    "?!",
    "def embed(texts: list[str]) -> np.ndarray:\n    return model.encode(texts)",
    "https://example.org/path?query=1&other=two#fragment",
    "3.14159 2.71828 1.41421 42 1e-12",
    "the the the the the the the the the the the the",
    "What did we decide about the release freeze before the holidays last year?",
    "Chronic exposure to particulate matter increases the incidence of cardiovascular disease. " * 24,
]


def require_torch() -> None:
    if not installed_runtimes().torch:
        if os.environ.get("KB_TEST_REQUIRE_ALL") == "1":
            pytest.fail("torch and sentence-transformers are required (pip install -e '.[engine,test]')")
        pytest.skip("needs torch and sentence-transformers to compare with")


@pytest.fixture(scope="module")
def reference() -> Any:
    """The ORIGINAL float32 weights on torch, as sentence-transformers runs them (not the bundled float16-stored
    copy the engine runs: the comparison covers the rounding too)."""
    return original_torch_model()


def test_the_texts_exercise_truncation(model_dir: Path) -> None:
    untruncated = WordPieceTokenizer.from_file(model_dir / "tokenizer.json", max_length=100_000)
    assert len(untruncated.encode(LONG)) > 256
    assert [len(ids) for ids in token_ids(load_tokenizer(model_dir), [LONG, TEXTS[-1]])] == [256, 256]


def test_tokens_are_sentence_transformers_tokens(model_dir: Path, reference: Any) -> None:
    expected = reference.tokenize(TEXTS)
    input_ids, mask = padded(token_ids(load_tokenizer(model_dir), TEXTS))
    assert input_ids.tolist() == expected["input_ids"].tolist()
    assert mask.tolist() == expected["attention_mask"].tolist()


def test_onnx_vectors_agree_with_torch_float32_per_text(model: Embedder, reference: Any) -> None:
    assert isinstance(model, OnnxEmbedder)  # the default runtime on this CPU
    expected = reference.encode(TEXTS, batch_size=16, normalize_embeddings=True, convert_to_numpy=True)
    documents = model.embed_documents(TEXTS)  # padded together, in the pool's shares
    queries = np.stack([model.embed_query(text) for text in TEXTS])  # one at a time, unpadded
    for vectors in (documents, queries):
        assert vectors.dtype == np.float32 and vectors.shape == (len(TEXTS), model.dim)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        cosines = np.sum(vectors * expected, axis=1)
        # float32 is the same computation (0.99999+); int8, where the calibration chose it, is held to issue
        # 34's bound (tests/engine/test_engine_onnx_int8.py checks it for int8 forced)
        bound = 0.999 if model.document_precision == model.query_precision == "float32" else 0.99
        assert cosines.min() >= bound, dict(zip(TEXTS, cosines.round(6).tolist(), strict=True))


def test_the_graph_takes_every_dimension_from_config_json(tmp_path: Path) -> None:
    """A made-up small BERT (other sizes, heads, layers, eps) built by transformers with random weights:
    the graph written from its config.json and safetensors computes what the model computes."""
    require_torch()
    import torch
    from safetensors.torch import save_file
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=97, hidden_size=24, num_attention_heads=3, num_hidden_layers=2,
                        intermediate_size=40, max_position_embeddings=33, layer_norm_eps=1e-7)
    torch.manual_seed(7)
    bert = BertModel(config, add_pooling_layer=False).eval()
    save_file({name: tensor.contiguous() for name, tensor in bert.state_dict().items()},
              str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(config.to_json_string(), encoding="utf-8")
    input_ids = np.array([[2, 15, 60, 9, 3, 0, 0], [2, 96, 3, 0, 0, 0, 0], [2, 7, 8, 9, 10, 11, 3]])
    mask = (input_ids != 0).astype(np.int64)
    mask[:, 0] = 1

    with torch.inference_mode():
        tokens = bert(input_ids=torch.tensor(input_ids), attention_mask=torch.tensor(mask)).last_hidden_state
        weights = torch.tensor(mask, dtype=torch.float32).unsqueeze(-1)
        pooled = (tokens * weights).sum(1) / weights.sum(1)
        expected = torch.nn.functional.normalize(pooled, dim=1).numpy()
    import onnxruntime

    session = onnxruntime.InferenceSession(build_model(tmp_path).serialized(),
                                           providers=["CPUExecutionProvider"])
    actual = session.run([OUTPUT], {INPUT_IDS: input_ids, ATTENTION_MASK: mask})[0]
    assert actual.shape == (3, 24)
    assert np.allclose(actual, expected, atol=1e-5)


def test_weights_that_do_not_match_the_config_are_refused(model_dir: Path, tmp_path: Path) -> None:
    for name in ("model.safetensors", "tokenizer.json"):
        (tmp_path / name).symlink_to(model_dir / name)
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    for change, message in (({"intermediate_size": 1024}, "intermediate.dense.weight"),
                            ({"num_hidden_layers": 5}, "more layers"),
                            ({"num_hidden_layers": 7}, "encoder.layer.6")):
        (tmp_path / "config.json").write_text(json.dumps({**config, **change}), encoding="utf-8")
        with pytest.raises(ValueError, match=message):
            build_model(tmp_path)


def test_a_config_the_graph_cannot_express_is_refused() -> None:
    base = {"hidden_size": 384, "num_attention_heads": 12, "num_hidden_layers": 6, "intermediate_size": 1536,
            "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "vocab_size": 30522}
    assert BertShape.from_config(base).head_size == 32
    for change in ({"hidden_act": "gelu_new"}, {"model_type": "roberta"}, {"num_attention_heads": 7},
                   {"position_embedding_type": "relative_key"}):
        with pytest.raises(ValueError):
            BertShape.from_config({**base, **change})


def test_sessions_are_laid_out_like_the_torch_copies(model: Embedder) -> None:
    assert isinstance(model, OnnxEmbedder)
    workers, threads_each = plan_workers(0, "cpu", usable_cores())
    copies = model._documents._models
    assert model.document_workers == len(copies) == workers
    sessions = {id(copy.session) for copy in copies} | {id(model._query.session)}
    assert len(sessions) == workers + 1  # one session per document thread, and one for queries
    assert [copy.session.get_session_options().intra_op_num_threads for copy in copies] == [threads_each] * workers
    assert model._query.session.get_session_options().intra_op_num_threads == 1
    assert len({id(copy.tokenizer) for copy in copies} | {id(model._query.tokenizer)}) == 1  # one, shared


def test_a_query_never_waits_behind_a_document_batch(model: Embedder) -> None:
    """Every document session held mid-batch: a query still comes back."""
    assert isinstance(model, OnnxEmbedder)
    release = threading.Event()
    entered = threading.Semaphore(0)
    copies = model._documents._models
    originals = [copy.session for copy in copies]

    class Held:
        def __init__(self, session: Any) -> None:
            self._session = session

        def run(self, *args: Any, **kwargs: Any) -> Any:
            entered.release()
            release.wait(60)
            return self._session.run(*args, **kwargs)

    for copy in copies:
        copy.session = Held(copy.session)  # type: ignore[assignment]
    batch = threading.Thread(target=model.embed_documents, args=(TEXTS,))
    try:
        batch.start()
        for _ in copies:
            assert entered.acquire(timeout=60), "a document session never started its batch"
        vector = model.submit_query("is the release frozen?").result(timeout=60)
        assert vector.shape == (model.dim,) and not release.is_set()
    finally:
        release.set()
        batch.join(60)
        for copy, session in zip(copies, originals, strict=True):
            copy.session = session


def test_no_texts_no_vectors(model: Embedder) -> None:
    assert model.embed_documents([]).shape == (0, model.dim)


@pytest.mark.parametrize("variable", ["document_precision", "query_precision"])
def test_a_16_bit_precision_is_refused_by_the_onnx_runtime(model_dir: Path, variable: str) -> None:
    with pytest.raises(ConfigError, match=f"KB_ENGINE_{variable.upper()}=bfloat16"):
        OnnxEmbedder(model_dir, "all-MiniLM-L6-v2", **{variable: "bfloat16"})


def test_the_model_directory_is_found_without_torch_or_the_original_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec

    def without_torch(name: str, *args: Any) -> Any:
        hidden = ("sentence_transformers", "torch", "transformers", ORIGINAL_PACKAGE)
        return None if name.split(".")[0] in hidden else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_torch)
    model_dir = bundled_model_dir()
    assert model_dir is not None and (model_dir / "model.safetensors").is_file()
    assert installed_runtimes().torch is False and installed_runtimes().onnx is True


def test_the_dimension_is_the_configs_hidden_size(model: Embedder, model_dir: Path) -> None:
    assert model.dim == json.loads((model_dir / "config.json").read_text(encoding="utf-8"))["hidden_size"] == 384
