"""What a queued job describes: the document it becomes, with the text of an uploaded file extracted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..errors import IngestionError
from ..store.base import ClaimedJob, NewDocument, text_sha256
from . import parsers
from .notes import derive_title


def staged_path(job: ClaimedJob, directory: Path) -> Path | None:
    """Where the job's uploaded file waits in the staging directory (file jobs)."""
    return directory / job.staged_path if job.staged_path else None


def read_job(job: ClaimedJob, staging_dir: Path,
             extract: Callable[[Path, str], str] = parsers.extract_text) -> NewDocument:
    """The document a job describes; IngestionError (the job fails alone) if its file cannot be read.
    `extract` reads a file into text (the worker's: in a child process with limits, ingest/file_reader.py)."""
    payload = job.payload
    tags = tuple(payload.get("tags") or ())
    if job.type == "note":
        text = str(payload.get("text") or "")
        return NewDocument(
            title=payload.get("title") or derive_title(text),
            doc_type="note",
            source_path=payload.get("source_path"),
            size_bytes=len(text.encode("utf-8")),
            sha256=text_sha256(text),
            content=text,
            tags=tags,
            created_at=payload.get("created_at"),
            updated_at=payload.get("updated_at"),
            changed_by=payload.get("changed_by"),
        )
    path = staged_path(job, staging_dir)
    if path is None or not path.is_file():
        raise IngestionError("the uploaded file is missing from the engine's staging directory")
    filename = job.filename or path.name
    return NewDocument(
        title=payload.get("title") or filename,
        doc_type=payload["doc_type"],
        source_path=payload.get("source_path") or f"uploads/{filename}",
        size_bytes=int(payload["size"]),
        sha256=str(payload["sha256"]),
        content=extract(path, payload["doc_type"]),
        tags=tags,
        created_at=payload.get("created_at"),
        updated_at=payload.get("updated_at"),
    )
