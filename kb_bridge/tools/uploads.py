"""The three-step upload plus kb_upload_status: start, chunk x N, finish.

Agents cannot send a large file in one message, so they send base64 chunks that the bridge
stages in a shared store (any worker or host may take any step), verifies, and streams to the
engine as one multipart upload. The tools never know which store they use.
"""

from __future__ import annotations

import binascii
import hashlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kb_bridge.credentials.scopes import WRITE
from kb_bridge import collection_tags, shapes
from kb_bridge.errors import Conflict, InvalidArgument, KbError, StorageError, StorageFull, UploadIncomplete
from kb_bridge.tools import arguments as a
from kb_bridge.tools import reach
from kb_bridge.tools.spec import ProgressFn, Result, ToolContext, ToolSpec
from kb_bridge.tools.waiting import TERMINAL, JobProgress, wait_for_job
from kb_bridge.uploads.multipart import file_job_body
from kb_bridge.uploads.names import check_type, new_upload_id, safe_filename
from kb_bridge.uploads.store import Progress, Upload

logger = logging.getLogger(__name__)

MAX_CHUNKS = 100_000
SHA256 = {"type": "string", "pattern": a.SHA256_PATTERN}
# Ids are checked by the store (a malformed id is "not found", not a validation error).
UPLOAD_ID = {"type": "string", "minLength": 1, "maxLength": 100}


@dataclass(frozen=True, kw_only=True)
class StartArguments:
    filename: str = a.field({"type": "string", "minLength": 1, "maxLength": 1024})
    total_size: int = a.field({"type": "integer", "minimum": 1, "maximum": 2**53})
    tags: tuple[str, ...] = a.field(a.TAGS, default=())
    collection: str = a.field(a.COLLECTION, default=collection_tags.DEFAULT)
    title: str | None = a.field(a.TITLE, default=None)
    source_path: str | None = a.field(a.SOURCE_PATH, default=None)
    sha256: str | None = a.field(SHA256, default=None, description="of the whole file, checked at finish")


@dataclass(frozen=True, kw_only=True)
class ChunkArguments:
    upload_id: str = a.field(UPLOAD_ID)
    data: str = a.field({"type": "string"})
    chunk_index: int = a.field({"type": "integer", "minimum": 0, "maximum": MAX_CHUNKS - 1})
    sha256: str | None = a.field(SHA256, default=None)


@dataclass(frozen=True, kw_only=True)
class UploadIdArguments:
    upload_id: str = a.field(UPLOAD_ID)


@dataclass(frozen=True, kw_only=True)
class FinishArguments:
    upload_id: str = a.field(UPLOAD_ID)
    wait: bool = a.field(a.BOOLEAN, default=False)


@dataclass(frozen=True, kw_only=True)
class StatusArguments:
    upload_id: str | None = a.field(UPLOAD_ID, default=None)


START_OUTPUT = shapes.result(
    {"upload_id": shapes.STR, "filename": shapes.STR, "max_chunk_bytes": shapes.INT, "expires_at": shapes.STR}
)
CHUNK_OUTPUT = shapes.result(
    {"upload_id": shapes.STR, "chunk_index": shapes.INT, "received_bytes": shapes.INT, "total_size": shapes.INT}
)
FINISH_OUTPUT = shapes.result(
    {"job_id": shapes.INT, "status": shapes.STR, "filename": shapes.STR, "size_bytes": shapes.INT, "sha256": shapes.STR}
)
CANCEL_OUTPUT = shapes.result({"upload_id": shapes.STR, "cancelled": shapes.BOOL, "job_id": shapes.OPT_INT})
OPEN_UPLOAD = shapes.obj(
    {"upload_id": shapes.STR, "filename": shapes.STR, "received_bytes": shapes.INT, "total_size": shapes.INT,
     "expires_at": shapes.STR},
    required=[],
)
STATUS_OUTPUT = shapes.result(
    {
        "uploads": {"type": "array", "items": OPEN_UPLOAD, "description": "without upload_id: your open uploads"},
        "upload_id": shapes.STR,
        "filename": shapes.STR,
        "total_size": shapes.INT,
        "received_bytes": shapes.INT,
        "received_chunks": {"type": "array", "items": shapes.INT},
        "missing": {"type": "array", "items": shapes.INT},
        "expires_at": shapes.STR,
        "finished": {"type": "boolean"},
        "job_id": shapes.OPT_INT,
    }
)


def iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def start(ctx: ToolContext, args: StartArguments) -> Result:
    reach.require_writable(ctx.principal, args.collection)
    limits = ctx.settings.uploads
    filename = safe_filename(args.filename)
    check_type(filename, limits.extensions, "filename")
    if args.total_size > limits.max_bytes:
        raise InvalidArgument("total_size", f"must be at most {limits.max_bytes} bytes")
    upload = Upload(
        upload_id=new_upload_id(),
        owner=ctx.principal.owner,
        filename=filename,
        total_size=args.total_size,
        tags=collection_tags.tags_with_collection(args.collection, args.tags),
        collection=args.collection,
        title=args.title,
        source_path=args.source_path,
        sha256=args.sha256.lower() if args.sha256 is not None else None,
    )
    ctx.uploads.create(upload, limits.max_uploads_per_caller, limits.max_staged_bytes_per_caller)
    return {
        "upload_id": upload.upload_id,
        "filename": filename,
        "max_chunk_bytes": limits.max_chunk_bytes,
        "expires_at": iso(upload.created_at + limits.ttl_seconds),
    }


def decode_chunk(data: str, max_bytes: int) -> bytes:
    """Base64 to bytes, refusing oversize input before decoding and any non-canonical alphabet."""
    if len(data) > math.ceil(max_bytes / 3) * 4:
        raise InvalidArgument("data", f"a chunk may hold at most {max_bytes} bytes (before base64)")
    try:
        # strict_mode rejects what b64decode(validate=True) rejects (other alphabets, whitespace,
        # data after padding, bad padding) but in C, without a regex pass over the whole string.
        raw = binascii.a2b_base64(data, strict_mode=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument("data", "is not valid base64 (standard alphabet A-Z a-z 0-9 + /, with = padding)") from None
    if not raw:
        raise InvalidArgument("data", "must not be empty")
    return raw


def chunk(ctx: ToolContext, args: ChunkArguments) -> Result:
    upload_id, index, owner = args.upload_id, args.chunk_index, ctx.principal.owner
    upload = ctx.uploads.get(upload_id, owner)
    if index >= upload.total_size:
        raise InvalidArgument("chunk_index", f"is beyond the end of a {upload.total_size}-byte file")
    data = decode_chunk(args.data, ctx.settings.uploads.max_chunk_bytes)
    if len(data) <= upload.total_size < index + len(data):
        # Chunks 0..index-1 hold at least a byte each: this one cannot fit, and would make the upload
        # impossible to finish. Refused before anything is stored. (A chunk larger than the whole file is
        # the data's fault, refused by the store naming `data`.)
        raise InvalidArgument(
            "chunk_index",
            f"chunk {index} of {len(data)} bytes cannot belong to a {upload.total_size}-byte file (the {index} "
            "chunks before it hold at least one byte each); number chunks 0, 1, 2… in file order",
        )
    if args.sha256 is not None and hashlib.sha256(data).hexdigest() != args.sha256.lower():
        raise InvalidArgument("sha256", "does not match the chunk's bytes; the chunk was not stored")
    progress = ctx.uploads.put_chunk(upload_id, owner, index, data)
    return {
        "upload_id": upload_id,
        "chunk_index": index,
        "received_bytes": progress.received_bytes,
        "total_size": upload.total_size,
    }


def missing_chunks(progress: Progress, total_size: int) -> list[int]:
    """Indexes still to send.

    When the chunks received so far share one size (all but a shorter last one), the file needs
    ceil(total_size / size) chunks and every absent index below that is missing. Otherwise the
    count is unknown: the gaps below the highest index are missing, and one more while bytes lack.
    """
    indexes = progress.chunks
    highest = max(indexes, default=-1)
    sizes = {size for i, size in indexes.items() if i != highest} or set(indexes.values())
    if len(sizes) == 1:
        expected = min(math.ceil(total_size / sizes.pop()), MAX_CHUNKS)
        return [i for i in range(max(expected, highest + 1)) if i not in indexes]
    missing = [i for i in range(highest + 1) if i not in indexes]
    if not missing and progress.received_bytes < total_size:
        missing.append(highest + 1)
    return missing


def upload_status(ctx: ToolContext, args: StatusArguments) -> Result:
    if args.upload_id is None:
        ttl = ctx.settings.uploads.ttl_seconds
        return {"uploads": [
            {"upload_id": upload.upload_id, "filename": upload.filename, "received_bytes": progress.received_bytes,
             "total_size": upload.total_size, "expires_at": iso(progress.last_activity + ttl)}
            for upload, progress in ctx.uploads.open_uploads(ctx.principal.owner)
        ]}
    upload = ctx.uploads.get(args.upload_id, ctx.principal.owner)
    progress = ctx.uploads.progress(upload.upload_id, ctx.principal.owner)
    finished = upload.result is not None
    return {
        "upload_id": upload.upload_id,
        "filename": upload.filename,
        "total_size": upload.total_size,
        "received_bytes": upload.total_size if finished else progress.received_bytes,
        "received_chunks": sorted(progress.chunks),
        "missing": [] if finished else missing_chunks(progress, upload.total_size),
        "expires_at": iso(progress.last_activity + ctx.settings.uploads.ttl_seconds),
        "finished": finished,
        "job_id": upload.result.get("job_id") if upload.result else None,
    }


def finish(ctx: ToolContext, args: FinishArguments) -> Result:
    """Send the staged file to the engine as one job; with `wait`, then wait for the job (outside the
    upload's finishing lock), sending bytes to the engine as the first half of the progress and the job's
    stages (tools/waiting.py) as the second."""
    result = _send(ctx, args.upload_id, onto=50.0 if args.wait else None)
    if not args.wait or result["status"] in TERMINAL:
        return result
    job = wait_for_job(ctx, {"id": result["job_id"], "status": result["status"]}, ctx.settings.mcp.wait_seconds,
                       "file", JobProgress(ctx.progress, low=50.0))
    return {**result, "status": job["status"]}


def _send(ctx: ToolContext, upload_id: str, onto: float | None) -> Result:
    owner = ctx.principal.owner
    with ctx.uploads.finishing(upload_id, owner) as upload:
        if upload.result is not None:
            return _as_it_stands(ctx, upload.result)  # finishing twice is harmless: same job, no new document
        # Checked again where the bytes go to the engine: the token's collections may have changed in the
        # tokens file since kb_upload_start (a restart reads it again; the staged upload outlives it).
        reach.require_writable(ctx.principal, upload.collection)
        count = _complete_chunk_count(ctx.uploads.progress(upload.upload_id, owner), upload.total_size)
        digest = _sha256(ctx, upload, count)
        if upload.sha256 is not None and digest != upload.sha256:
            raise Conflict(
                "the file's sha256 does not match the one given at kb_upload_start; nothing was sent",
                expected_sha256=upload.sha256, actual_sha256=digest,
            )
        body = file_job_body(
            upload.filename, upload.total_size, lambda: ctx.uploads.read_chunks(upload.upload_id, owner, count),
            _fields(upload), progress=_throttled(ctx.progress, upload.total_size, onto),
        )
        # Derived from the upload: a retried or repeated finish names the same engine job.
        job = shapes.job(ctx.engine.upload_file_job(body, idempotency_key=f"kb-bridge-upload-{upload.upload_id}"))
        result = {
            "job_id": job["id"],
            "status": job["status"],
            "filename": upload.filename,
            "size_bytes": upload.total_size,
            "sha256": digest,
        }
        try:
            ctx.uploads.mark_finished(upload.upload_id, owner, result)
        except (StorageError, StorageFull):
            # The engine job exists: that is the answer. The upload stays staged, unmarked; a repeated finish
            # sends it again with the same Idempotency-Key, and the engine answers with this same job.
            logger.warning("upload %s became engine job %s but could not be marked finished in staging",
                           upload.upload_id, job["id"])
        return result


def _as_it_stands(ctx: ToolContext, result: dict[str, Any]) -> Result:
    """A finished upload's result with its job's current status from the engine (the stored one when the
    engine cannot say)."""
    try:
        job = shapes.job(ctx.engine.get_job(int(result["job_id"])))
    except KbError:
        return dict(result)
    return {**result, "status": job["status"]}


def cancel(ctx: ToolContext, args: UploadIdArguments) -> Result:
    upload = ctx.uploads.cancel(args.upload_id, ctx.principal.owner)
    if upload is not None and upload.result is not None:
        return {"upload_id": args.upload_id, "cancelled": False, "job_id": upload.result.get("job_id")}
    return {"upload_id": args.upload_id, "cancelled": upload is not None, "job_id": None}


def _complete_chunk_count(progress: Progress, total_size: int) -> int:
    missing = missing_chunks(progress, total_size)
    if missing or progress.received_bytes < total_size:
        raise UploadIncomplete(
            f"received {progress.received_bytes} of {total_size} bytes; send the missing chunks and finish again",
            missing=missing, received_bytes=progress.received_bytes,
        )
    if progress.received_bytes > total_size:
        raise Conflict(f"received {progress.received_bytes} bytes, more than total_size {total_size}; start again")
    return len(progress.chunks)


def _sha256(ctx: ToolContext, upload: Upload, count: int) -> str:
    digest = hashlib.sha256()
    for block in ctx.uploads.read_chunks(upload.upload_id, ctx.principal.owner, count):
        digest.update(block)
    return digest.hexdigest()


def _fields(upload: Upload) -> list[tuple[str, str]]:
    fields = [("title", upload.title or upload.filename), ("source_path", upload.source_path or f"uploads/{upload.filename}")]
    return fields + [("tags", tag) for tag in upload.tags]


def _throttled(progress: ProgressFn, total: int, onto: float | None = None) -> Callable[[int], None]:
    """Report bytes sent at most ~4 times a second, and always the last byte: as bytes of the file's
    size, or (`onto`) as the first `onto` of 100."""
    last = [0.0]

    def report(sent: int) -> None:
        now = time.monotonic()
        if sent >= total or now - last[0] >= 0.25:
            last[0] = now
            if onto is None:
                progress(float(sent), float(total), "sending the file to the engine")
            else:
                progress(round(onto * sent / total, 3), 100.0, f"sending the file to the engine: {sent} of {total} bytes")

    return report


def render_start(r: Result) -> str:
    return (
        f"Upload {r['upload_id']} started for {r['filename']}. Send base64 chunks of at most "
        f"{r['max_chunk_bytes']} bytes (decoded) with kb_upload_chunk, chunk_index 0, 1, 2…, then kb_upload_finish. "
        f"Expires {r['expires_at']} if idle."
    )


def render_chunk(r: Result) -> str:
    return f"Chunk {r['chunk_index']} stored: {r['received_bytes']} of {r['total_size']} bytes received."


def render_finish(r: Result) -> str:
    if r["status"] == "done":
        return f"{r['filename']} ({r['size_bytes']} bytes, sha256 {r['sha256']}) is indexed (job {r['job_id']})."
    return (
        f"{r['filename']} ({r['size_bytes']} bytes, sha256 {r['sha256']}) sent to the engine as job {r['job_id']}"
        f" ({r['status']}); it becomes searchable when the job is done (kb_jobs)."
    )


def render_cancel(r: Result) -> str:
    if r["cancelled"]:
        return f"Upload {r['upload_id']} cancelled: its staged data is gone and its slot is free."
    if r["job_id"] is not None:
        return f"Upload {r['upload_id']} was already finished as job {r['job_id']}; nothing to cancel."
    return f"There is no open upload {r['upload_id']} (already cancelled, expired, or never started); nothing to do."


def render_status(r: Result) -> str:
    if "uploads" in r:
        if not r["uploads"]:
            return "You have no open uploads."
        return f"{len(r['uploads'])} open upload(s):\n" + "\n".join(
            f"- {u['upload_id']} {u['filename']}: {u['received_bytes']} of {u['total_size']} bytes, expires {u['expires_at']} if idle"
            for u in r["uploads"]
        )
    if r["finished"]:
        return f"Upload {r['upload_id']} is finished: job {r['job_id']}."
    missing = ", ".join(str(i) for i in r["missing"][:50]) or "none"
    return (
        f"Upload {r['upload_id']} ({r['filename']}): {r['received_bytes']} of {r['total_size']} bytes, "
        f"chunks received: {len(r['received_chunks'])}, missing: {missing}. Expires {r['expires_at']} if idle."
    )


TOOLS = [
    ToolSpec(
        name="kb_upload_start",
        description=(
            "Step 1 of 3 to add a file (txt, md, pdf, html, docx): filename and total_size in bytes; returns "
            "upload_id and max_chunk_bytes. Then kb_upload_chunk per chunk, then kb_upload_finish."
        ),
        arguments=StartArguments,
        output_schema=START_OUTPUT,
        handler=start,
        render=render_start,
        read_only=False,
    ),
    ToolSpec(
        name="kb_upload_chunk",
        description=(
            "Step 2: one chunk's bytes as standard base64, chunk_index from 0 in file order; any order, and "
            "resending is safe. A given sha256 (hex) of the chunk is checked."
        ),
        arguments=ChunkArguments,
        output_schema=CHUNK_OUTPUT,
        handler=chunk,
        render=render_chunk,
        read_only=False,
        idempotent=True,
    ),
    ToolSpec(
        name="kb_upload_finish",
        description=(
            "Step 3: assemble, verify and index the file; returns the job id (with wait, once searchable). "
            "Safe to repeat."
        ),
        arguments=FinishArguments,
        output_schema=FINISH_OUTPUT,
        handler=finish,
        render=render_finish,
        read_only=False,
        idempotent=True,
    ),
    ToolSpec(
        name="kb_upload_status",
        description="An upload's received and missing chunks (to resume it); without upload_id, your open "
        "uploads.",
        arguments=StatusArguments,
        output_schema=STATUS_OUTPUT,
        handler=upload_status,
        render=render_status,
        read_only=True,
        idempotent=True,
        scope=WRITE,  # uploads are writing, start to finish
    ),
    ToolSpec(
        name="kb_upload_cancel",
        description="Abandon an unfinished upload, deleting its staged chunks (they stop counting against your "
        "limits). Repeating it, or an unknown upload, is not an error.",
        arguments=UploadIdArguments,
        output_schema=CANCEL_OUTPUT,
        handler=cancel,
        render=render_cancel,
        read_only=False,
        destructive=True,
        idempotent=True,
        scope=WRITE,  # it drops staged bytes of one's own upload, never a stored document
    ),
]
