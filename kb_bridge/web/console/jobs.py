"""The job queue, a page at a time and filtered by status, and one job (JSON for console.js's live status).
Which jobs a principal sees is the rule every job view shares (tools/reach.py), decided from the job itself;
kb_jobs is the tool that shows jobs, so without it (or without kb:read) both are 403."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import abort, jsonify, render_template, request, url_for
from flask.typing import ResponseReturnValue

from kb_bridge.tools import reach
from kb_bridge.tools.arguments import JOB_STATUS
from kb_bridge.tools.status import visible_jobs
from kb_bridge.web.console.state import blueprint, current_console, principal, require, wants_json, whole_number

PAGE = 25
STATUSES: tuple[str, ...] = tuple(JOB_STATUS["enum"])
# The engine's job types (docs/engine-api.md, "Job"), in words.
KINDS = {"note": "New note", "file": "File upload", "update": "Note update"}
LIVE = ("queued", "running")


def _when(stamp: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None
    except ValueError:
        return None


def _duration(seconds: float) -> str:
    if seconds < 0.1:
        return "under 0.1 s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def shown(job: dict[str, Any]) -> dict[str, Any]:
    """A job as the pages and the live status show it: its kind in words, times to the second (UTC), how
    long it ran (or has waited and run so far), and where its document is."""
    created, started, finished = (_when(job.get(k)) for k in ("created_at", "started_at", "finished_at"))
    begun = started or created
    took = _duration((finished - begun).total_seconds()) if finished and begun else ""
    document = job.get("document_id")
    return {**job, "kind": KINDS.get(job.get("type") or "", "Job"),
            "created": created.strftime("%Y-%m-%d %H:%M:%S") if created else "",
            "finished": finished.strftime("%Y-%m-%d %H:%M:%S") if finished else "",
            "duration": took, "live": job.get("status") in LIVE,
            "document_url": url_for("console.document", document_id=document) if document else None,
            "url": url_for("console.job", job_id=job["id"])}


@blueprint.get("/jobs")
def jobs() -> ResponseReturnValue:
    require("kb_jobs")
    status = request.args.get("status") or None
    if status is not None and status not in STATUSES:
        abort(400, f"status must be one of {', '.join(STATUSES)}")
    page = whole_number(request.args.get("page", "1"), "page must be a whole number from 1", 100_000)
    bridge = current_console().bridge
    with bridge.engine.deadline(bridge.settings.engine.call_deadline()):
        listed, total, read = visible_jobs(bridge.engine, principal(), status, PAGE, (page - 1) * PAGE)
    rows = [shown(job) for job in listed]
    if wants_json():
        return jsonify(jobs=rows, total=total)
    # A limited token sees some of each engine page: its total is unknown, and a full engine page may have more.
    more = page * PAGE < total if total is not None else read == PAGE
    pages = -(-total // PAGE) if total else None
    return render_template("jobs.html", title="Jobs", jobs=rows, status=status, statuses=STATUSES, page=page,
                           pages=pages, total=total, more=more, live=any(r["live"] for r in rows))


@blueprint.get("/jobs/<int:job_id>")
def job(job_id: int) -> ResponseReturnValue:
    # Refused before the job is looked up, so the answer says nothing of whether the job exists. A job out
    # of reach is NOT_FOUND, word for word as a missing one.
    require("kb_jobs")
    bridge = current_console().bridge
    with bridge.engine.deadline(bridge.settings.engine.call_deadline()):
        found = shown(reach.visible_job(bridge.engine, principal(), job_id))
    if wants_json():
        return jsonify(found)
    return render_template("job.html", title=f"Job {job_id}", job=found)
