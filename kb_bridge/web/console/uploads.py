"""Uploading a file: the three upload tools run as an agent runs them (the same checks of type, size and
collection, the same staging, the same per-caller limits KB_UPLOAD_MAX_PER_CALLER and
KB_UPLOAD_MAX_STAGED_BYTES); the browser sends one form, the view sends it on in the tools' chunks."""

from __future__ import annotations

import base64
import logging
from typing import IO, Any

from flask import jsonify, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.datastructures import FileStorage

from kb_bridge import collection_tags as collection_names
from kb_bridge.errors import InvalidArgument, KbError
from kb_bridge.tools.spec import Result
from kb_bridge.web.console.choices import collection_choices, preselected
from kb_bridge.web.console.offer import UPLOAD_TOOLS
from kb_bridge.web.console.state import blueprint, call, current_console, principal, require, usable, wants_json

logger = logging.getLogger(__name__)


@blueprint.get("/upload")
def upload_page() -> ResponseReturnValue:
    require(*UPLOAD_TOOLS)
    names = collection_choices()
    extensions = current_console().bridge.settings.uploads.extensions
    return render_template("upload.html", title="Upload", collections=names, default=preselected(names),
                           extensions=", ".join(extensions), accept=",".join(f".{e}" for e in extensions))


@blueprint.post("/upload")
def upload() -> ResponseReturnValue:
    """One or several files into one collection, with the same tags; each becomes a job. A file refused
    stops the form before any later file is sent; the earlier ones are already queued, so the answer lists
    them beside the refusal (with the refusal's status), and the person sends the rest again. A refusal of
    the first file is the refusal alone."""
    require(*UPLOAD_TOOLS)
    files = [f for f in request.files.getlist("file") if f.filename]
    if not files:
        raise InvalidArgument("file", "choose a file to upload")
    collection = request.form.get("collection") or collection_names.DEFAULT
    tags = [t.strip() for t in request.form.get("tags", "").split(",") if t.strip()]
    sent: list[dict[str, Any]] = []
    refused: str | None = None
    status = 200
    for file in files:
        try:
            finished = _sent_file(file, collection, tags)
        except KbError as exc:
            if not sent:
                raise
            refused = (f"{file.filename} was refused ({exc.code}: {exc.message}); it and the files after it were "
                       "not sent, the files above were")
            status = exc.http_status
            break
        job = {"id": finished["job_id"], "status": finished["status"], "filename": finished["filename"]}
        sent.append({"job": job, "url": url_for("console.job", job_id=job["id"]) if usable("kb_jobs") else None})
    if wants_json():
        return jsonify(job=sent[0]["job"], url=sent[0]["url"], jobs=sent,
                       **({"error": refused} if refused is not None else {})), status
    if refused is None and len(sent) == 1 and sent[0]["url"] is not None:
        return redirect(str(sent[0]["url"]))
    return render_template("uploaded.html", title="Uploaded", jobs=[s["job"] for s in sent], can_follow=usable("kb_jobs"),
                           refused=refused), status


def _sent_file(file: FileStorage, collection: str, tags: list[str]) -> Result:
    """kb_upload_finish's result for one file of the form; an empty file is refused."""
    stream = file.stream
    stream.seek(0, 2)
    size = stream.tell()
    if size == 0:
        raise InvalidArgument("file", f"{file.filename} is empty")
    return _sent(file.filename or "", stream, size, collection, tags)


def _sent(filename: str, stream: IO[bytes], size: int, collection: str, tags: list[str]) -> Result:
    """kb_upload_finish's result for the file, sent with kb_upload_start and kb_upload_chunk."""
    started = call("kb_upload_start", {"filename": filename, "total_size": size, "collection": collection, "tags": tags})
    upload_id = str(started["upload_id"])
    try:
        stream.seek(0)
        for index, piece in enumerate(iter(lambda: stream.read(int(started["max_chunk_bytes"])), b"")):
            call("kb_upload_chunk", {"upload_id": upload_id, "chunk_index": index,
                                     "data": base64.b64encode(piece).decode("ascii")})
        return call("kb_upload_finish", {"upload_id": upload_id})
    except BaseException:
        _abandon(upload_id)
        raise


def _abandon(upload_id: str) -> None:
    """Free the staged bytes and the caller's upload slot of a console upload that failed part way (the
    person sends the file again; nobody resumes it)."""
    bridge = current_console().bridge
    try:
        bridge.uploads.cancel(upload_id, principal().owner)
    except KbError:
        logger.warning("could not cancel the failed console upload %s; it expires with the upload TTL", upload_id)
