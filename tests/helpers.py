"""Small builders for engine JSON and assertions on recorded engine calls."""

from __future__ import annotations

import json
from typing import Any

import responses

from tests.conftest import API


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
    return [c for c in mock.calls if c.request.method == method and c.request.url.split("?")[0] == url]


def minimal_pdf(lines: list[str]) -> bytes:
    """A valid one-page PDF showing `lines` in Helvetica (enough for a text extractor)."""
    text_ops = "BT /F1 12 Tf 72 720 Td 14 TL " + " ".join(
        "(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") '" for line in lines
    ) + " ET"
    stream = text_ops.encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, obj in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + obj + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for offset in offsets:
        out += f"{offset:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)
