"""The fake engine of the unit tests (a `responses` mock at ENGINE): settings that point at it, small builders of
its JSON, and assertions on the calls it recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import responses

from kb_bridge.settings import EngineSettings, McpSettings, Settings, UploadSettings

ENGINE = "http://127.0.0.1:8000"
API = ENGINE + "/api/v1"


def document(id: int = 42, **fields: Any) -> dict[str, Any]:
    doc = {
        "id": id, "title": "note", "doc_type": "note", "source_path": None,
        "tags": ["collection:documents"], "chunk_count": 1, "size_bytes": 10, "sha256": "x",
        "version": 1, "created_at": "2026-04-04T21:50:19Z", "updated_at": "2026-04-05T08:00:00Z",
    }
    doc.update(fields)
    return doc


def chunk(chunk_id: int = 901, document_id: int = 42, **fields: Any) -> dict[str, Any]:
    hit = {
        "chunk_id": chunk_id, "document_id": document_id, "chunk_index": 0, "text": "some text", "score": 0.03,
        "title": "report.pdf", "source_path": "uploads/report.pdf", "doc_type": "pdf",
        "tags": ["collection:documents"], "created_at": "2026-04-04T21:50:19Z", "updated_at": "2026-04-05T08:00:00Z",
    }
    hit.update(fields)
    return hit


def job(id: int = 7, **fields: Any) -> dict[str, Any]:
    value = {
        "id": id, "type": "note", "status": "queued", "document_id": None, "filename": None, "error": None,
        "created_at": "2026-04-04T21:50:19Z", "started_at": None, "finished_at": None,
    }
    value.update(fields)
    return value


def search_response(*hits: dict[str, Any], mode: str = "hybrid") -> dict[str, Any]:
    return {"query": "q", "mode": mode, "took_ms": 1.0, "results": list(hits)}


def body(call: Any) -> Any:
    return json.loads(call.request.body)


def calls_to(mock: responses.RequestsMock, method: str, path: str) -> list[Any]:
    url = API + path
    return [c for c in mock.calls if c.request.method == method and str(c.request.url).split("?")[0] == url]


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    """Test settings: no waiting between retries, staging under tmp_path."""
    engine = EngineSettings(retry_backoff=0, retry_max_wait=0, **overrides.pop("engine", {}))
    uploads = UploadSettings(dir=str(tmp_path / "uploads"), **overrides.pop("uploads", {}))
    mcp = McpSettings(**overrides.pop("mcp", {}))
    return Settings(engine=engine, uploads=uploads, mcp=mcp, **overrides)
