"""POST /api/v1/jobs (a JSON note or a multipart file upload) and the job queue's read endpoints."""

from __future__ import annotations

import re
import unicodedata
from pathlib import PurePosixPath, PureWindowsPath

from flask import Blueprint, Response, jsonify, request

from ..errors import PayloadTooLarge, UnsupportedMediaType, ValidationError
from ..ingest import parsers
from ..ingest.staging import HashingFile
from ..store.base import JOB_STATUSES, PRIORITIES
from . import current_engine, validation
from .times import document_times

blueprint = Blueprint("jobs", __name__)

MAX_IDEMPOTENCY_KEY_CHARS = 255
MAX_FILENAME_CHARS = 255
MAX_USER_AGENT_CHARS = 200
_UNSAFE_FILENAME_CHARS = re.compile(r"[\x00-\x1f\x7f\"\\/]")


@blueprint.post("/api/v1/jobs")
def create_job() -> tuple[Response, int]:
    key = _idempotency_key()
    if request.mimetype == "multipart/form-data":
        job, created = _submit_upload(key)
    else:
        job, created = _submit_note(key)
    return jsonify(job), 202 if created else 200


def _submit_note(key: str | None) -> tuple[dict[str, object], bool]:
    engine = current_engine()
    body = validation.json_object(engine.config.max_json_bytes)
    tags = list(validation.tags(body.get("tags")))
    fields: dict[str, object] = {
        "text": validation.string(body, "text", required=True),
        "title": validation.string(body, "title", max_chars=validation.MAX_TITLE_CHARS),
        "tags": tags,
        "source_path": validation.string(body, "source_path", max_chars=validation.MAX_PATH_CHARS),
        **document_times(body),
    }
    changed_by = validation.changed_by(body)
    if changed_by is not None:
        fields["changed_by"] = changed_by
    unique_in = validation.string(body, "unique_in", max_chars=validation.MAX_TAG_CHARS)
    if unique_in is not None and unique_in not in tags:
        raise ValidationError("unique_in must be one of the note's tags (the scope it must be unique in)", field="unique_in")
    return engine.intake.submit_note(fields, key, _priority(validation.string(body, "priority")), unique_in)


def _submit_upload(key: str | None) -> tuple[dict[str, object], bool]:
    engine = current_engine()
    upload = request.files.get("file")  # parsing streams the file into staging (uploads.HashingFile)
    if upload is None:
        raise ValidationError("file is required: send the document as the multipart part named 'file'", field="file")
    filename = safe_filename(upload.filename or "")
    doc_type = parsers.doc_type_for(filename)
    if doc_type is None:
        supported = ", ".join(sorted(set(parsers.EXTENSIONS)))
        raise UnsupportedMediaType(f"{filename!r} is not a supported file type (supported: {supported})")
    missing = parsers.missing_parser(doc_type)
    if missing is not None:
        raise UnsupportedMediaType(f"{doc_type} files need the {missing} package: pip install 'kb-bridge[engine]'")
    part = upload.stream
    if not isinstance(part, HashingFile):  # always ours (EngineRequest); a guard, not a code path
        raise RuntimeError("upload was not streamed into staging")
    if part.size > engine.config.max_upload_bytes:
        raise PayloadTooLarge(f"the file is larger than this engine accepts ({engine.config.max_upload_bytes} bytes)")
    if part.size == 0:
        raise ValidationError("file is empty", field="file")
    form = request.form
    fields = {
        "title": validation.string(form, "title", max_chars=validation.MAX_TITLE_CHARS),
        "source_path": validation.string(form, "source_path", max_chars=validation.MAX_PATH_CHARS),
        "tags": list(validation.form_tags(form.getlist("tags"))),
        **document_times(form),
    }
    return engine.intake.submit_file(part, filename, doc_type, fields, key,
                                     _priority(validation.string(form, "priority")), _submitter())


def _submitter() -> str:
    """Who sent this upload, as far as the request shows (one API key serves every client): the peer address
    and the User-Agent, for telling an agent's single upload from another client's flood
    (ingest/scheduling.py, Submitters). Kept in memory only, never logged."""
    agent = request.headers.get("User-Agent", "")[:MAX_USER_AGENT_CHARS]
    return f"{request.remote_addr or ''} {agent}"


def _priority(value: str | None) -> str | None:
    """`priority`: "interactive" (embedded before bulk work) or "bulk"; absent: by size (ingest/submissions.py)."""
    if value is not None and value not in PRIORITIES:
        raise ValidationError(f"priority must be one of {', '.join(PRIORITIES)}, got {value!r}", field="priority")
    return value


def _idempotency_key() -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    key = key.strip()
    if not key or len(key) > MAX_IDEMPOTENCY_KEY_CHARS:
        raise ValidationError(f"Idempotency-Key must have 1 to {MAX_IDEMPOTENCY_KEY_CHARS} characters",
                              field="Idempotency-Key")
    # PostgreSQL text cannot hold NUL (a 500 there, taken on SQLite). gunicorn refuses control characters in a
    # header before we see it; another server, or the app run in-process, may not.
    return validation.no_nul(key, "Idempotency-Key")


def safe_filename(name: str) -> str:
    """The base name of a client's file name, without path parts or control characters."""
    name = unicodedata.normalize("NFC", name)
    base = PureWindowsPath(PurePosixPath(name).name).name
    base = _UNSAFE_FILENAME_CHARS.sub("", base).strip().strip(".")
    base = "".join(c for c in base if unicodedata.category(c) not in ("Cf", "Cc"))
    if not base:
        raise ValidationError("file must have a file name (the type is taken from its extension)", field="file")
    if len(base) > MAX_FILENAME_CHARS:
        stem, dot, suffix = base.rpartition(".")
        base = stem[: MAX_FILENAME_CHARS - len(suffix) - 1] + dot + suffix if dot else base[:MAX_FILENAME_CHARS]
    return base


@blueprint.get("/api/v1/jobs")
def list_jobs() -> dict[str, object]:
    engine = current_engine()
    status = request.args.get("status") or None
    if status is not None and status not in JOB_STATUSES:
        raise ValidationError(f"status must be one of {', '.join(JOB_STATUSES)}", field="status")
    limit, offset = validation.page_args()
    found, total = engine.store.list_jobs(status, limit, offset)
    return {"jobs": found, "total": total}


@blueprint.get("/api/v1/jobs/<id:job_id>")
def get_job(job_id: int) -> dict[str, object]:
    engine = current_engine()
    job = engine.store.get_job(job_id)
    # 3.10: how far a running job is, when this process runs it (another replica's job shows none).
    progress = engine.worker.progress(job_id) if job["status"] == "running" else None
    if progress is not None:
        job["progress"] = {"chunks_done": progress[0], "chunks_total": progress[1]}
    return job


@blueprint.delete("/api/v1/jobs/<id:job_id>")
def cancel_job(job_id: int) -> dict[str, object]:
    """3.10: take back a queued job (200, the job now `cancelled`; again: the same); 409 once it runs or ran."""
    return current_engine().intake.cancel(job_id)
