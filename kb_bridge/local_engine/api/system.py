"""/healthz (public liveness) and /api/v1/status (what this engine can do and holds)."""

from __future__ import annotations

from flask import Blueprint

from ..embedding.embedder import Embedder
from ..engine import API_VERSION
from . import current_engine

blueprint = Blueprint("system", __name__)


@blueprint.get("/healthz")
def healthz() -> dict[str, object]:
    return {"ok": True}


@blueprint.get("/api/v1/status")
def status() -> dict[str, object]:
    engine = current_engine()
    embedder = engine.embedders.current()
    counts = engine.store.counts()
    queue = engine.store.queue_counts()
    return {
        "version": API_VERSION,
        "api": "v1",
        "model": _model(embedder),
        # The device the model really runs on (KB_ENGINE_DEVICE); nothing runs anywhere without a model.
        "device": embedder.device if embedder is not None else "cpu",
        "search_modes": engine.searcher.modes(),
        # Beyond the contract: why there is no model (disabled, not installed, loading, failed).
        "embedder": {"state": engine.embedders.state, "reason": engine.embedders.reason},
        "documents": {"total": counts["documents"], "notes": counts["notes"], "files": counts["files"]},
        "chunks": counts["chunks"],
        "vectors": engine.store.vector_count(),
        "queue": queue,
        "store": engine.store.kind,
        "indexes": engine.store.index_status(),
    }


def _model(embedder: Embedder | None) -> dict[str, object] | None:
    if embedder is None:
        return None
    return {"name": embedder.name, "dim": embedder.dim, "batch_size": embedder.batch_size,
            # "onnx" (ONNX Runtime, the CPU default) or "torch" (sentence-transformers): embedding/runtime.py
            "runtime": getattr(embedder, "runtime", None),
            "document_workers": getattr(embedder, "document_workers", 1),
            "precision": {"documents": getattr(embedder, "document_precision", "float32"),
                          "queries": getattr(embedder, "query_precision", "float32")},
            # int8's form on the ONNX runtime ("smoothed" or "blockwise", embedding/onnx_int8.py); else null
            "int8_form": getattr(embedder, "int8_form", None)}
