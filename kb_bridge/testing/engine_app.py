"""Helpers for the engine tests: polling with deadlines, adding notes, uploading files, error bodies, and BM25's
IDF written out independently of the engine (the figure the ranking tests expect)."""

from __future__ import annotations

import dataclasses
import io
import math
import time
from collections.abc import Callable
from typing import Any

from flask.testing import FlaskClient

API = "/api/v1"
DEADLINE_SECONDS = 60.0


def bm25_idf(total: int, held: int) -> float:
    """BM25's IDF of a word that `held` of `total` chunks hold (Lucene's form, the one tantivy uses)."""
    return math.log(1 + (total - held + 0.5) / (held + 0.5))


def wait_for(predicate: Callable[[], Any], what: str, deadline: float = DEADLINE_SECONDS) -> Any:
    """Poll until predicate() is truthy; fail naming `what` after the deadline."""
    end = time.monotonic() + deadline
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline:.0f} s waiting for {what}")
        time.sleep(0.01)


def wait_job(client: FlaskClient, job_id: int) -> dict[str, Any]:
    """The job once it is done or failed."""

    def finished() -> dict[str, Any] | None:
        job: dict[str, Any] = client.get(f"{API}/jobs/{job_id}").get_json()
        return job if job["status"] in ("done", "failed") else None

    return wait_for(finished, f"job {job_id}")


def add_note(client: FlaskClient, text: str, **fields: Any) -> dict[str, Any]:
    """Queue a note, wait for its job, return the created document."""
    response = client.post(f"{API}/jobs", json={"text": text, **fields})
    assert response.status_code == 202, response.json
    job = wait_job(client, response.get_json()["id"])
    assert job["status"] == "done", job
    document: dict[str, Any] = client.get(f"{API}/documents/{job['document_id']}").get_json()
    return document


def upload(client: FlaskClient, filename: str, data: bytes, headers: dict[str, str] | None = None,
           **fields: Any) -> Any:
    form: dict[str, Any] = {"file": (io.BytesIO(data), filename), **fields}
    return client.post(f"{API}/jobs", data=form, content_type="multipart/form-data", headers=headers or {})


def error_code(response: Any) -> str:
    body = response.json
    # The contract's shape (docs/engine-api.md, "Errors"): `field` (3.16) when the error names one.
    assert set(body) == {"error"} and set(body["error"]) in ({"code", "message"}, {"code", "message", "field"}), body
    assert "field" not in body["error"] or body["error"]["field"], body
    return str(body["error"]["code"])


@dataclasses.dataclass
class Sample:
    """Small documents with distinct topics, for search tests."""

    pension: str = (
        "Pension revaluation: deferred pension benefits are revalued every year in line with the consumer "
        "price index, capped at five percent."
    )
    cooking: str = "To bake sourdough bread, feed the starter, knead the dough, let it rise overnight and bake hot."
    astronomy: str = "Jupiter is the largest planet of the solar system; its great red spot is a giant storm."


def make_pdf(text: str) -> bytes:
    """A one-page PDF showing `text` (ASCII) in Helvetica; written by hand, byte offsets and all."""
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    stream = f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET".encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def make_docx(heading: str, paragraphs: list[str]) -> bytes:
    import docx

    document = docx.Document()
    document.add_heading(heading, level=1)
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()
