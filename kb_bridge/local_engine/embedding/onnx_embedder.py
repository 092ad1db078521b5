"""all-MiniLM-L6-v2 on ONNX Runtime: the engine's default embedder on a CPU (runtime.py says when).

The graph is built in memory from the bundled weights (onnx_graph.py) and opened as several
InferenceSessions, the same layout as the torch embedder's:

- **Documents**: one session per document worker (document_pool.py plans how many and how many threads
  each: one one-thread session per core on small machines), each with its own thread (one tokenizer serves all). Calls
  into one session from two threads measured at half the speed of two sessions (16 against 32 chunks/s on
  2 cores), so each worker has a session of its own. Their threads (when a session has more than one) do
  not spin between operators, unlike ORT's default, for the reason `OMP_WAIT_POLICY=PASSIVE` is set for
  torch: the cores are shared with uploads, commits and searches.
- **Queries**: a session of its own on a thread of its own, `query_threads` wide (query_model.py explains
  why for torch; the same holds here), so a query never waits behind a document batch.

Memory: every session reads the same weight arrays (onnxruntime uses an initializer given with
`add_initializer` in place), so a document worker costs its working memory only; the query session alone
keeps a prepacked copy of the weight matrices (45 MB) for its latency (`_Sessions.open`). The transient
copies made while building go back to the system once the sessions exist. Every session's first run
happens here, at load, so that a broken graph fails the load (status says why) and the first search pays
no allocation.

Precision (onnx_precision.py): float32, or int8 weights (onnx_int8.py) where a calibration at load finds
them as good and faster. The calibration runs on the query session, opened in both formats; the one not
chosen is closed again. Documents and queries may differ (KB_ENGINE_DOCUMENT_PRECISION and
KB_ENGINE_QUERY_PRECISION); each format's sessions share that format's weights. int8 runs one text per
call, float32 `batch_size` texts (the reason is in `OnnxEmbedder.__init__`).
"""

from __future__ import annotations

import ctypes
import json
import logging
import sys
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .document_pool import DocumentPool, plan_workers, usable_cores
from .onnx_graph import ATTENTION_MASK, INPUT_IDS, OUTPUT, build_model, read_shape
from .onnx_precision import Agreement, calibrate, choose, onnx_precision
from .onnx_proto import Model
from .tokens import load_tokenizer, max_seq_length, padded, token_ids

if TYPE_CHECKING:
    import numpy as np
    import onnxruntime

    from .wordpiece import WordPieceTokenizer

logger = logging.getLogger(__name__)

# Weights at least this big are given to every session as one shared array; the small constants (shapes,
# axes, scalars) stay in the graph, where onnxruntime's optimiser folds them.
_SHARED_BYTES = 4096
_WARM_UP = "The first run allocates the session's working memory."


def _return_freed_memory() -> None:
    """Hand the heap that building the graph used (the weights' transient copies, 200 MB) back to the system:
    glibc keeps freed heap memory in the process otherwise, and it would count as the engine's for good."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim): nothing to do
        pass


class OnnxEmbedder:
    """The bundled model on ONNX Runtime, on the CPU; see the module's docstring for the layout."""

    runtime = "onnx"

    def __init__(
        self, model_dir: Path, name: str, batch_size: int = 16, query_precision: str = "auto",
        query_threads: int = 1, document_precision: str = "auto", document_workers: int = 0,
        model: Model | None = None, int8_form: str | None = None, int8_texts_per_call: int = 1,
    ) -> None:
        self.name = name
        # Which 8-bit form (onnx_int8.py) the int8 sessions run, when there are any.
        self.int8_form: str | None = None
        self.batch_size = batch_size
        self.device = "cpu"
        shape = read_shape(model_dir)
        self.dim = shape.hidden
        if max_seq_length(model_dir) > shape.max_positions:
            raise ValueError(f"max_seq_length {max_seq_length(model_dir)} is beyond the model's "
                             f"{shape.max_positions} positions")
        documents_choice = onnx_precision(document_precision, "KB_ENGINE_DOCUMENT_PRECISION")
        queries_choice = onnx_precision(query_precision, "KB_ENGINE_QUERY_PRECISION")
        pad_id = int(json.loads((model_dir / "config.json").read_text(encoding="utf-8")).get("pad_token_id", 0))
        workers, threads_each = plan_workers(document_workers, "cpu", usable_cores())
        float32 = model if model is not None else build_model(model_dir)
        sessions = {"float32": _Sessions(float32)}
        if {documents_choice, queries_choice} != {"float32"}:
            from .onnx_int8 import int8_model

            quantised, self.int8_form = int8_model(float32, model_dir, int8_form)
            sessions["int8"] = _Sessions(quantised)
            del quantised
        del float32, model
        tokenizer = load_tokenizer(model_dir)  # one for every session: tokens.py says why it may be shared
        # int8 runs one text per call: both forms quantise a call's input with scales taken across the call
        # (the smoothed one a single scale over all of it), so a text run with others took their range and its
        # vector changed with its company (cosine down to 0.997 to itself alone over 1,000 LoCoMo turns), and
        # the same note stored twice got two vectors. One text per call also pads nothing;
        # bench/int8_per_text.py measures what it costs.
        per_call = {"float32": batch_size, "int8": int8_texts_per_call}
        queries = {precision: _Copy(opened.open(query_threads, spin=True, prepack=True), tokenizer,
                                    pad_id, per_call[precision]) for precision, opened in sessions.items()}
        agreement = None
        if "int8" in queries:
            agreement = calibrate(queries["float32"].embed, queries["int8"].embed,
                                  timed="auto" in (documents_choice, queries_choice))
        self.document_precision = choose(documents_choice, agreement, "documents' model")
        self.query_precision = choose(queries_choice, agreement, "query model")
        # The lowest cosine to float32 over the calibration texts: what the store records (store_precision.py).
        self.document_agreement = _agreement(self.document_precision, agreement)
        self.query_agreement = _agreement(self.query_precision, agreement)
        used = {self.document_precision, self.query_precision}
        # The sessions read these arrays in place: they live as long as we do.
        self._weights = [sessions[precision].weights for precision in sorted(used)]
        # A document session prepacks its int8 weights (12 MB each): MatMulNBits without prepacking ran at
        # 0.74 times the speed of float32, with it at 1.5 times. float32 ones do not (the reason: `open`).
        int8_documents = self.document_precision == "int8"
        self._documents = DocumentPool(
            [_Copy(sessions[self.document_precision].open(threads_each, spin=False, prepack=int8_documents),
                   tokenizer, pad_id, per_call[self.document_precision]) for _ in range(workers)],
            _Copy.embed,
        )
        self.document_workers = workers
        self._query = queries[self.query_precision]
        self._query_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kb-engine-query")
        del sessions, queries  # the graphs' bytes (90 MB in float32), and the query session not chosen
        _return_freed_memory()
        logger.info("ONNX Runtime: %d document session(s) of %d thread(s) in %s, a query session of %d in %s",
                    workers, threads_each, self.document_precision, query_threads, self.query_precision)
        self.embed_documents([_WARM_UP] * workers)
        self.embed_query(_WARM_UP)

    @property
    def document_format(self) -> str:
        """The documents' number format as store_precision.py records it: the two int8 forms make different
        vectors, so they are told apart ("int8" alone is the blockwise form, as stores recorded it before)."""
        if self.document_precision == "int8" and self.int8_form == "smoothed":
            return "int8-smoothed"
        return self.document_precision

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            import numpy as np

            return np.empty((0, self.dim), dtype=np.float32)
        return self._documents.embed(texts)

    def submit_query(self, text: str) -> Future[np.ndarray]:
        """Embed one query on the query thread; the caller may do other work (the BM25 query) meanwhile."""
        return self._query_thread.submit(lambda: self._query.embed([text])[0])

    def embed_query(self, text: str) -> np.ndarray:
        return self.submit_query(text).result()


def _agreement(precision: str, agreement: Agreement | None) -> float:
    return agreement.cosine if precision == "int8" and agreement is not None else 1.0


class _Copy:
    """One session (and the shared tokenizer); used by one thread at a time."""

    def __init__(self, session: onnxruntime.InferenceSession, tokenizer: WordPieceTokenizer, pad_id: int,
                 batch_size: int) -> None:
        self.session = session
        self.tokenizer = tokenizer
        self.pad_id = pad_id
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 vectors, in the order of `texts`; run `batch_size` texts at a time, texts of
        like length together (each run pads to its longest)."""
        import numpy as np

        ids = token_ids(self.tokenizer, texts)
        order = sorted(range(len(ids)), key=lambda row: len(ids[row]))
        vectors: np.ndarray | None = None
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            input_ids, mask = padded([ids[row] for row in rows], self.pad_id)
            output = self.session.run([OUTPUT], {INPUT_IDS: input_ids, ATTENTION_MASK: mask})[0]
            if vectors is None:
                vectors = np.empty((len(texts), output.shape[1]), dtype=np.float32)
            vectors[rows] = output
        assert vectors is not None  # texts is never empty here
        return vectors


class _Sessions:
    """Opens InferenceSessions on one model; every session reads the same weight arrays."""

    def __init__(self, model: Model) -> None:
        import numpy as np
        import onnxruntime

        self.weights: dict[str, Any] = {
            initializer.name: np.ascontiguousarray(initializer.array)
            for initializer in model.graph.initializers if initializer.array.nbytes >= _SHARED_BYTES
        }
        self._values = {name: onnxruntime.OrtValue.ortvalue_from_numpy(array) for name, array in self.weights.items()}
        self._serialized = model.serialized()

    def open(self, threads: int, *, spin: bool, prepack: bool) -> onnxruntime.InferenceSession:
        """A session `threads` wide. `spin`: its threads spin between operators (lower latency, busier cores).
        `prepack`: it keeps its own copy of the weight matrices in the GEMM's layout (45 MB): a query then
        takes 4.7 ms instead of 8.3; a document batch gains 3 %, not worth a copy per document worker."""
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        # Every batch has its own shape (padded to its longest text): a memory plan cached per shape would
        # only grow. The arena still reuses buffers from run to run.
        options.enable_mem_pattern = False
        options.log_severity_level = 3  # errors only: onnxruntime writes to stderr, past the engine's log format
        if not spin:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if not prepack:
            options.add_session_config_entry("session.disable_prepacking", "1")
        for name, value in self._values.items():
            options.add_initializer(name, value)
        return onnxruntime.InferenceSession(self._serialized, options, providers=["CPUExecutionProvider"])
