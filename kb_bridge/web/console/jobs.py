"""The job queue, and one job (JSON for console.js's live status). Which jobs a principal sees is the rule
every job view shares (tools/reach.py), decided from the job itself."""

from __future__ import annotations

from flask import jsonify, render_template
from flask.typing import ResponseReturnValue

from kb_bridge.tools import reach
from kb_bridge.web.console.state import blueprint, call, current_console, principal, require, wants_json


@blueprint.get("/jobs")
def jobs() -> ResponseReturnValue:
    listed = call("kb_jobs", {"limit": 50})
    return render_template("jobs.html", title="Jobs", jobs=listed["jobs"])


@blueprint.get("/jobs/<int:job_id>")
def job(job_id: int) -> ResponseReturnValue:
    # kb_jobs is the tool that shows jobs: without it (or without kb:read) 403 before the job is looked up,
    # so the answer says nothing of whether the job exists. A job out of reach is NOT_FOUND, word for word
    # as a missing one.
    require("kb_jobs")
    bridge = current_console().bridge
    with bridge.engine.deadline(bridge.settings.engine.call_deadline()):
        found = reach.visible_job(bridge.engine, principal(), job_id)
    if wants_json():
        return jsonify(found)
    return render_template("job.html", title=f"Job {job_id}", job=found)
