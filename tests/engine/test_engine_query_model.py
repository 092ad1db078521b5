"""The torch query model: its own thread with one torch thread, and vectors that agree with the documents' model
(the ONNX query session: test_engine_onnx.py)."""

from __future__ import annotations

import threading

import numpy as np

from kb_bridge.local_engine.embedding.embedder import SentenceTransformerEmbedder


def test_queries_use_one_torch_thread_and_other_threads_keep_the_default(
    torch_model: SentenceTransformerEmbedder,
) -> None:
    import torch

    assert torch_model._queries.run(torch.get_num_threads) == 1
    seen: list[int] = []
    other = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    other.start()
    other.join()
    assert seen == [torch.get_num_threads()]  # a thread that first uses torch now still gets the default


def test_query_vectors_agree_with_document_vectors_whatever_the_precision(
    torch_model: SentenceTransformerEmbedder,
) -> None:
    model = torch_model
    # bfloat16 is taken only where it agrees with float32 (query_model.py); either way a query embeds
    # like the same text embedded as a document.
    assert model.query_precision in ("float32", "bfloat16")
    texts = ["time off after having a baby", "Error code ZX-4471 appears when the disk quota is exceeded."]
    documents = model.embed_documents(texts)
    for text, document in zip(texts, documents, strict=True):
        query = model.embed_query(text)
        assert query.dtype == np.float32 and query.shape == (model.dim,)
        assert float(np.dot(query, document)) > 0.999
