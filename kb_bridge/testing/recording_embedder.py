"""An embedder for engine tests: the real one, with a record of every documents call and a gate that holds
the first call until the test has queued its jobs, so that the queue is full when the worker looks at it."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from kb_bridge.local_engine.embedding.embedder import Embedder


class RecordingEmbedder:
    """The real embedder, with a record of every documents call and a gate before the first one."""

    def __init__(self, model: Embedder) -> None:
        self._model = model
        self.name, self.dim, self.device = model.name, model.dim, model.device
        self.batch_size = model.batch_size
        self.calls: list[list[str]] = []
        self.gate = threading.Event()
        self.first_call = threading.Event()
        self.returned = 0

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.first_call.set()
        assert self.gate.wait(60), "the test never opened the gate"
        self.calls.append(list(texts))
        vectors = self._model.embed_documents(texts)
        self.returned += 1
        return vectors

    def submit_query(self, text: str) -> Future[np.ndarray]:
        return self._model.submit_query(text)

    def embed_query(self, text: str) -> np.ndarray:
        return self._model.embed_query(text)
