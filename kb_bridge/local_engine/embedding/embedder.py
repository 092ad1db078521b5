"""Embeddings: one small interface, the bundled all-MiniLM-L6-v2 behind it, and a loader with a state.

The model ships inside kb-bridge (model/, beside this module: the weights stored in float16, 45 MB; its
README.md says where they come from and how they were made): nothing is downloaded at run time, and the
`engine` extra needs no torch to have it. It runs on one of two runtimes, chosen by KB_ENGINE_RUNTIME
(runtime.py): ONNX Runtime on the CPU (onnx_embedder.py, the default), or sentence-transformers on torch
(`SentenceTransformerEmbedder` below, for a GPU; the `gpu` extra) on the device KB_ENGINE_DEVICE selects
(device.py), in the number format that is fastest there without changing the vectors (precision.py), with
the Hugging Face hub switched off.
Without the `engine` extra, or with KB_ENGINE_EMBEDDER=none, there is no embedder and the engine serves
full-text search only, saying so in /status and in every result's `mode`.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

# The name stores record with their vectors (engine.py): the bundled float16-stored weights keep the name of
# the float32 ones they were rounded from, as their vectors are the same to cosine 0.9999 (model/README.md).
MODEL_NAME = "all-MiniLM-L6-v2"


class Embedder(Protocol):
    """Texts in, L2-normalised float32 vectors out (shape: len(texts) x dim)."""

    name: str
    dim: int
    device: str
    batch_size: int

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray: ...

    def submit_query(self, text: str) -> Future[np.ndarray]: ...

    def embed_query(self, text: str) -> np.ndarray: ...


def bundled_model_dir() -> Path | None:
    """The model directory inside kb-bridge, or None when its weights are missing (a copy of the source
    without them); whether a runtime to run it is installed is runtime.py's question."""
    model_dir = Path(__file__).resolve().parent / "model"
    return model_dir if (model_dir / "model.safetensors").is_file() else None


# What the documents' model is calibrated on (precision.py): two chunk-sized texts (about 1,000 characters,
# as the default chunking makes them), embedded together as the worker does.
_DOCUMENT_SAMPLE = tuple(
    " ".join([sentence] * 11)
    for sentence in (
        "Vitamin D deficiency is associated with a higher risk of respiratory infections in adults.",
        "The release freeze starts two weeks before the holidays; only security fixes are merged.",
    )
)
DOCUMENT_MIN_COSINE = 0.999


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 on torch, on one device.

    Separate copies of the model for queries and for documents: the Hugging Face fast tokenizer that
    sentence-transformers runs is not safe to call from two threads at once ("Already borrowed"; the ONNX
    embedder's pure-Python one is, and is shared: tokens.py), and one shared copy behind a lock would make every
    search wait for the ingestion worker's current batch (seconds). The copy for queries is small (90 MB,
    45 MB in bfloat16), answers in milliseconds, and runs on a thread of its own (query_model.py says how and
    why). Documents go to a pool of copies working side by side (document_pool.py).
    """

    def __init__(
        self, model_dir: Path, name: str = MODEL_NAME, batch_size: int = 16, query_precision: str = "auto",
        query_threads: int = 1, device: str = "cpu", document_precision: str = "auto", document_workers: int = 0,
    ) -> None:
        from .device import half_precision
        from .document_pool import DocumentPool, plan_workers, usable_cores
        from .precision import in_precision
        from .query_model import QueryThread, limit_torch_threads

        self.runtime = "torch"
        self.name = name
        self.batch_size = batch_size
        self.device = device
        half = half_precision(device)
        documents_model = load_sentence_transformer(model_dir, device)
        dimension = getattr(documents_model, "get_embedding_dimension", None)
        dimension = dimension or documents_model.get_sentence_embedding_dimension
        self.dim = int(dimension())
        documents_model, self.document_precision = in_precision(
            documents_model, document_precision, half, lambda model: self._encode(model, list(_DOCUMENT_SAMPLE)),
            DOCUMENT_MIN_COSINE, "documents' model",
        )
        workers, threads_each = plan_workers(document_workers, device, usable_cores())
        copies = [documents_model] + [copy.deepcopy(documents_model) for _ in range(workers - 1)]
        self._documents = DocumentPool(copies, self._encode,
                                       partial(limit_torch_threads, threads=threads_each) if threads_each else None)
        self.document_workers = workers
        self._queries = QueryThread(load_sentence_transformer(model_dir, device), query_precision, query_threads,
                                    half)
        self.query_precision = self._queries.precision

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            import numpy as np

            return np.empty((0, self.dim), dtype=np.float32)
        return self._documents.embed(texts)

    def submit_query(self, text: str) -> Future[np.ndarray]:
        """Embed one query on the query thread; the caller may do other work (the BM25 query) meanwhile."""
        return self._queries.submit(text)

    def embed_query(self, text: str) -> np.ndarray:
        return self.submit_query(text).result()

    def _encode(self, model: object, texts: list[str]) -> np.ndarray:
        import numpy as np

        vectors = model.encode(  # type: ignore[attr-defined]
            texts, batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False,
        )
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)
        # Normalised here, in float32: a bfloat16 model normalises in bfloat16, whose vectors are off unit length
        # by up to 0.4 %, and every score downstream is a dot product (as encode_query in query_model.py does).
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, np.float32(1e-12))


def load_sentence_transformer(model_dir: Path, device: str) -> Any:
    """The model of `model_dir` on sentence-transformers, in float32, never asking the hub (the benchmarks
    load it this way too)."""
    # The hub must never be asked: the weights are local, and the machine may have no network.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from sentence_transformers import SentenceTransformer

    try:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    except ImportError:  # an older transformers without the switch only prints more
        pass
    import torch

    # The bundled weights are stored in float16, and transformers 5 loads a model in the type of its weights
    # unless told: widened to float32 (exactly), the model computes as the original float32 one does, and
    # the number format it then runs in is precision.py's choice, calibrated against float32.
    return SentenceTransformer(str(model_dir), device=device, model_kwargs={"torch_dtype": torch.float32})


class EmbedderSlot:
    """Where the engine finds its embedder, and what state it is in.

    States: `disabled` (no model configured or installed), `loading`, `ready`, `failed`.
    Search and ingestion ask `current()` and fall back to full text while it is None.
    """

    def __init__(self) -> None:
        self.state = "disabled"
        self.reason: str | None = None
        self._embedder: Embedder | None = None
        self._settled = threading.Event()
        self._settled.set()
        # Held by a load as it begins and by the ingestion worker while it claims a job (`steady`), so that a
        # job claimed under it was claimed before the load began, and every later claim sees the load.
        self._beginning = threading.Lock()
        self._listeners: list[Callable[[Embedder], None]] = []

    def current(self) -> Embedder | None:
        return self._embedder if self.state == "ready" else None

    def on_ready(self, listener: Callable[[Embedder], None]) -> None:
        """Call `listener(embedder)` once the model is ready (in the loading thread, before `ready` shows)."""
        self._listeners.append(listener)

    def disable(self, reason: str) -> None:
        self.state, self.reason = "disabled", reason

    def use(self, embedder: Embedder) -> None:
        """Install an already loaded embedder (tests share one model across engines this way)."""
        self._begin_loading()
        self._finish(embedder)

    def load(self, factory: Callable[[], Embedder], background: bool) -> None:
        self._begin_loading()
        if background:
            threading.Thread(target=self._load, args=(factory,), name="kb-engine-model", daemon=True).start()
        else:
            self._load(factory)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the slot is no longer `loading`; False on timeout."""
        return self._settled.wait(timeout)

    @contextmanager
    def steady(self) -> Iterator[bool]:
        """Whether the slot is settled, kept true for the block: a load begun meanwhile waits until it ends."""
        with self._beginning:
            yield self._settled.is_set()

    def _begin_loading(self) -> None:
        with self._beginning:
            self._settled.clear()
            self.state = "loading"

    def _load(self, factory: Callable[[], Embedder]) -> None:
        try:
            embedder = factory()
        except Exception as exc:
            logger.exception("loading the embedding model failed; serving full-text search only")
            self.state, self.reason = "failed", f"loading the model failed: {exc}"
            self._settled.set()
            return
        self._finish(embedder)

    def _finish(self, embedder: Embedder) -> None:
        try:
            for listener in self._listeners:
                listener(embedder)
        except Exception as exc:
            logger.exception("preparing vector search failed; serving full-text search only")
            self.state, self.reason = "failed", f"preparing vector search failed: {exc}"
            self._settled.set()
            return
        self._embedder = embedder
        self.state, self.reason = "ready", None
        self._settled.set()
        logger.info("embedding model %s ready (%d dimensions): vector and hybrid search enabled",
                    embedder.name, embedder.dim)


def start_embedder(
    slot: EmbedderSlot, choice: str, batch_size: int, background: bool, query_precision: str = "auto",
    query_threads: int = 1, device: str = "auto", document_precision: str = "auto", document_workers: int = 0,
    runtime: str = "auto",
) -> None:
    """Fill the slot as configured: `none`, `auto` (the model if installed) or `minilm` (must be installed).

    A runtime or device named in `runtime` / `device` that this machine lacks raises ConfigError here, before
    anything loads."""
    from .runtime import installed_runtimes, needs_accelerator_probe, select_runtime

    if choice == "none":
        slot.disable("disabled by configuration (KB_ENGINE_EMBEDDER=none)")
        logger.info("embeddings disabled by configuration: serving full-text search only")
        return
    model_dir = bundled_model_dir()
    installed = installed_runtimes()
    probe_later = needs_accelerator_probe(runtime, device, installed)
    # A runtime asked for by name is checked first: its message says what to install.
    named = select_runtime(runtime, device, installed) if runtime != "auto" and not probe_later else None
    if model_dir is None or not (installed.onnx or installed.torch):
        if choice == "minilm":
            raise ConfigError(
                "KB_ENGINE_EMBEDDER=minilm but the model is not installed: pip install 'kb-bridge[engine]'"
            )
        slot.disable("the embedding model is not installed (pip install 'kb-bridge[engine]')")
        logger.warning("the embedding model is not installed: serving full-text search only "
                       "(pip install 'kb-bridge[engine]' for vector and hybrid search)")
        return
    # Everything that can be decided without importing torch is decided now, so that a missing GPU or
    # runtime stops the engine at start; looking for a GPU with torch (1-2 s) happens while the model loads.
    if named is None and not probe_later:
        named = select_runtime(runtime, device, installed)
    if named is not None and named[0] == "onnx":
        from .onnx_precision import onnx_precision

        onnx_precision(document_precision, "KB_ENGINE_DOCUMENT_PRECISION")
        onnx_precision(query_precision, "KB_ENGINE_QUERY_PRECISION")
    elif named is not None:
        from .precision import torch_precision

        torch_precision(document_precision, "KB_ENGINE_DOCUMENT_PRECISION")
        torch_precision(query_precision, "KB_ENGINE_QUERY_PRECISION")

    def load() -> Embedder:
        chosen_runtime, chosen_device = named or select_runtime(runtime, device, installed)
        logger.info("loading embedding model %s from %s with %s on %s", MODEL_NAME, model_dir, chosen_runtime,
                    chosen_device)
        return make_embedder(chosen_runtime, model_dir, batch_size=batch_size, query_precision=query_precision,
                             query_threads=query_threads, device=chosen_device,
                             document_precision=document_precision, document_workers=document_workers)

    slot.load(load, background)


def make_embedder(runtime: str, model_dir: Path, *, batch_size: int, query_precision: str, query_threads: int,
                  device: str, document_precision: str, document_workers: int) -> Embedder:
    """The embedder of `runtime` ("onnx" or "torch"), loaded."""
    if runtime == "onnx":
        from .onnx_embedder import OnnxEmbedder

        return OnnxEmbedder(model_dir, MODEL_NAME, batch_size=batch_size, query_precision=query_precision,
                            query_threads=query_threads, document_precision=document_precision,
                            document_workers=document_workers)
    return SentenceTransformerEmbedder(model_dir, batch_size=batch_size, query_precision=query_precision,
                                       query_threads=query_threads, device=device,
                                       document_precision=document_precision, document_workers=document_workers)
