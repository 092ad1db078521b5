"""/healthz (public liveness) and /api/v1/status (what this engine can do and holds)."""

from __future__ import annotations

from flask import Blueprint

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
        "model": {"name": embedder.name, "dim": embedder.dim} if embedder is not None else None,
        "device": "cpu",
        "search_modes": engine.searcher.modes(),
        # Beyond the contract: why there is no model (disabled, not installed, loading, failed).
        "embedder": {"state": engine.embedders.state, "reason": engine.embedders.reason},
        "documents": {"total": counts["documents"], "notes": counts["notes"], "files": counts["files"]},
        "chunks": counts["chunks"],
        "vectors": engine.store.vector_count(),
        "queue": queue,
    }
