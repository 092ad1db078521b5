"""Documents embedded by several copies of the model side by side (embedding/document_pool.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from kb_bridge.local_engine.embedding.document_pool import DocumentPool, plan_workers, usable_cores
from kb_bridge.local_engine.embedding.embedder import SentenceTransformerEmbedder


@pytest.mark.parametrize("requested, device, cores, plan", [
    (0, "cpu", 2, (2, 1)),     # this machine: two one-thread copies
    (0, "cpu", 1, (1, 1)),
    (0, "cpu", 16, (4, 4)),    # more copies gain little: four, each a quarter of the cores
    (1, "cpu", 2, (1, 2)),     # KB_ENGINE_EMBED_WORKERS=1: one copy over all cores, as before the pool
    (3, "cpu", 2, (3, 1)),
    (0, "cuda", 8, (1, 0)),    # a GPU keeps one copy and torch's own threads
    (4, "mps", 8, (1, 0)),
])
def test_the_pool_is_planned_from_the_device_and_the_cores(requested: int, device: str, cores: int,
                                                           plan: tuple[int, int]) -> None:
    assert plan_workers(requested, device, cores) == plan


def test_every_text_comes_back_in_its_place_whatever_the_count() -> None:
    """Texts are dealt out to the copies in turn and their vectors put back in the caller's order."""
    seen: dict[str, set[str]] = {}

    def encode(model: object, texts: list[str]) -> np.ndarray:
        seen.setdefault(str(id(model)), set()).add(threading.current_thread().name)
        return np.array([[float(text), 1.0] for text in texts], dtype=np.float32)

    pool = DocumentPool([object(), object(), object()], encode)
    try:
        for count in range(1, 8):
            vectors = pool.embed([str(number) for number in range(count)])
            assert vectors.shape == (count, 2)
            assert vectors[:, 0].tolist() == list(range(count))
    finally:
        pool.close()
    assert len(seen) == 3  # three copies, each always on its own thread
    assert all(len(threads) == 1 for threads in seen.values())
    assert len(set().union(*seen.values())) == 3


def test_the_documents_pool_agrees_with_one_copy_and_limits_its_threads(
    torch_model: SentenceTransformerEmbedder,
) -> None:
    import torch

    model = torch_model
    pool = model._documents
    workers, threads_each = plan_workers(0, "cpu", usable_cores())
    assert model.document_workers == pool.workers == workers
    assert [executor.submit(torch.get_num_threads).result() for executor in pool._executors] == [threads_each] * workers
    texts = ["Vitamin D deficiency and respiratory infections in adults. " * 4, "short", "the release freeze",
             "Chronic exposure to particulate matter increases cardiovascular disease. " * 9, "ZX-4471"]
    pooled = model.embed_documents(texts)
    alone = model._encode(pool._models[0], texts)  # one copy, one call, on this thread
    assert pooled.shape == (5, model.dim)
    assert np.allclose(np.linalg.norm(pooled, axis=1), 1.0, atol=1e-5)  # unit length in any number format
    similarity = pooled @ alone.T
    assert np.argmax(similarity, axis=1).tolist() == list(range(5))  # every vector is its own text's
    # The copies see other batches (other padding) than one call over all five: in float32 that changes
    # nothing visible; in bfloat16 (chosen where the CPU has it) rounding moves a long text's vector by ~0.3 %.
    floor = 0.9999 if model.document_precision == "float32" else 0.99
    assert np.min(np.diag(similarity)) > floor
