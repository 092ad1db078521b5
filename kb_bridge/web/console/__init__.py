"""The web console at /ui/: people see and fix what agents stored, through the same tool handlers the MCP
tools run (so a token's scopes and collections limit the console exactly as they limit an agent).

Server-rendered pages that work without JavaScript; console.js only adds upload progress, the live job
status and the delete confirmation. Sessions are server-side (sessions.py); every state-changing request
carries the session's CSRF token (a form field or the X-CSRF-Token header), else 403 and nothing changes.
Sign-in itself is protected by a double-submit token (a short-lived cookie and the same value in the form).

Three rules make the console no wider than /mcp:
- it runs only the tools the bridge offers agents (offer.py: KB_MCP_READ_ONLY, KB_MCP_TOOLS) and shows
  controls only for those the principal may use; an upload runs the three upload tools, so it is staged and
  counted against the caller's upload limits like an agent's;
- a session lasts as long as its token (validity.py): every request asks the authenticator again;
- a job is visible by the rule every job view shares (tools/reach.py, job_visible), decided from the job.
"""

from __future__ import annotations

import base64
import hmac
import logging
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from flask import Blueprint, Response, abort, g, jsonify, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from kb_bridge import collections as collection_names
from kb_bridge.auth.bearer import Authenticator
from kb_bridge.auth.principal import ANONYMOUS, Principal
from kb_bridge.errors import Conflict, InvalidArgument, KbError
from kb_bridge.runtime import Bridge
from kb_bridge.tools import reach, registry
from kb_bridge.tools.spec import Result, ToolContext, ToolSpec
from kb_bridge.web.console.offer import UPLOAD_TOOLS, ConsoleTools
from kb_bridge.web.console.sessions import Session, Sessions
from kb_bridge.web.console.validity import current_principal, token_expiry

logger = logging.getLogger(__name__)

COOKIE = "kb_console"
PRE_COOKIE = "kb_console_signin"
SNIPPET = 300
_STATUS = {"NOT_FOUND": 404, "FORBIDDEN": 403, "VALIDATION_ERROR": 400, "CONFLICT": 409, "NOT_A_NOTE": 409,
           "UPLOAD_INCOMPLETE": 409, "TOO_LARGE": 413, "UNSUPPORTED_TYPE": 415, "LIMIT_EXCEEDED": 429,
           "STORAGE_FULL": 507}


def console_blueprint(bridge: Bridge, authenticator: Authenticator,
                      available: tuple[ToolSpec, ...] = registry.ALL_TOOLS) -> Blueprint:
    """The console for this bridge; `available` is the tool set /mcp selects from (the same selection)."""
    blueprint = Blueprint("console", __name__, url_prefix="/ui", template_folder="templates", static_folder="static")
    sessions = Sessions.for_settings(bridge.settings)
    tools = ConsoleTools(bridge.settings.mcp, available)
    secure_public = (bridge.settings.mcp.oauth.public_url or "").startswith("https://")

    def principal() -> Principal:
        session: Session = g.session
        return session.principal

    def call(tool: str, arguments: dict[str, Any]) -> Result:
        tools.require(principal(), tool)
        ctx = ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=principal())
        with ctx.engine.deadline(bridge.settings.engine.call_deadline()):
            return registry.call(ctx, tool, arguments)

    def secure() -> bool:
        return request.is_secure or secure_public

    def wants_json() -> bool:
        return request.accept_mimetypes.best == "application/json"

    @blueprint.before_request
    def load_session() -> ResponseReturnValue | None:
        if request.endpoint == "console.static":
            g.session = None
            return None
        g.session = _standing(sessions.find(request.cookies.get(COOKIE)))
        if request.endpoint == "console.sign_in":
            return None
        if g.session is None:
            if request.method == "GET":
                return redirect(url_for("console.sign_in"))
            abort(401)
        if request.method == "POST":
            sent = request.form.get("csrf_token") or request.headers.get("X-CSRF-Token") or ""
            if not hmac.compare_digest(sent.encode(), g.session.csrf.encode()):
                abort(403, "the form's security token is missing or out of date; reload the page and try again")
        return None

    def _standing(session: Session | None) -> Session | None:
        """The session with the principal its token makes now; None (and the record gone) when the token no
        longer makes one."""
        g.session_ended = False
        if session is None:
            return None
        now, reason = current_principal(authenticator, session)
        if now is None:
            sessions.end(session.id)
            g.session_ended = True
            bridge.metrics.auth_failure("console_session_ended")
            logger.info("ended a console session of %s: its token is no longer valid (%s)", session.principal.name,
                        reason.replace("_", " "))
            return None
        return replace(session, principal=now)

    @blueprint.after_request
    def headers(response: Response) -> Response:
        if getattr(g, "session_ended", False):
            response.delete_cookie(COOKIE, path="/ui")
        response.headers.setdefault("Cache-Control", "no-store")
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
            "form-action 'self'; base-uri 'none'")
        return response

    @blueprint.context_processor
    def page_context() -> dict[str, Any]:
        session = getattr(g, "session", None)
        who = session.principal if session else None

        def can(*names: str) -> bool:
            return who is not None and tools.usable(who, *names)

        return {"session": session, "principal": who, "can": can, "can_upload": can(*UPLOAD_TOOLS),
                "csrf": session.csrf if session else ""}

    @blueprint.errorhandler(KbError)
    def kb_error(exc: KbError) -> ResponseReturnValue:
        status = _STATUS.get(exc.code, 502)
        if wants_json():
            return jsonify(error=f"{exc.code}: {exc.message}"), status
        return render_template("error.html", title="Something went wrong", message=f"{exc.code}: {exc.message}"), status

    def refused(status: int) -> Callable[[Exception], ResponseReturnValue]:
        def handler(exc: Exception) -> ResponseReturnValue:
            message = getattr(exc, "description", "") or "refused"
            if wants_json():
                return jsonify(error=message), status
            return render_template("error.html", title="Refused", message=message), status
        return handler

    for status in (400, 401, 403, 404, 405, 413):
        blueprint.register_error_handler(status, refused(status))

    # --- signing in and out -----------------------------------------------------------------------

    @blueprint.route("/sign-in", methods=["GET", "POST"])
    def sign_in() -> ResponseReturnValue:
        if request.method == "GET":
            if g.session is not None:
                return redirect(url_for("console.search"))
            return _sign_in_page(None)
        pre = request.cookies.get(PRE_COOKIE, "")
        sent = request.form.get("csrf_token", "")
        if not pre or not hmac.compare_digest(pre.encode(), sent.encode()):
            abort(403, "the sign-in form's security token is missing or out of date; reload the page and try again")
        token = request.form.get("token", "").strip().encode("utf-8", "surrogateescape")
        kept: bytes | None = None
        expires: float | None = None
        if authenticator.enabled:
            found, _reason = authenticator.principal(token) if token else (None, "")
            kept = token  # the session asks about it again on every request (validity.py)
            expires = token_expiry(found, token) if found is not None else None
            if expires is not None and expires <= time.time():
                found = None  # expired, though within the verifier's clock-skew leeway: nothing to sign in for
        else:
            found = ANONYMOUS  # no auth configured: the console is as open as /mcp (loopback only)
        if found is None:
            bridge.metrics.auth_failure("console_token_invalid")
            return _sign_in_page("That access token is not valid. Check it and try again."), 401
        session = sessions.start(found, kept, expires)
        response = redirect(url_for("console.search"))
        response.set_cookie(COOKIE, session.id, max_age=max(1, int(session.expires - time.time())), httponly=True,
                            samesite="Strict", secure=secure(), path="/ui")
        response.delete_cookie(PRE_COOKIE, path="/ui")
        return response

    def _sign_in_page(error: str | None) -> Response:
        token = secrets.token_urlsafe(24)
        response = Response(render_template("sign_in.html", title="Sign in", error=error, signin_csrf=token,
                                            open_bridge=not authenticator.enabled))
        response.set_cookie(PRE_COOKIE, token, max_age=3600, httponly=True, samesite="Strict", secure=secure(), path="/ui")
        return response

    @blueprint.post("/sign-out")
    def sign_out() -> ResponseReturnValue:
        sessions.end(g.session.id)
        response = redirect(url_for("console.sign_in"))
        response.delete_cookie(COOKIE, path="/ui")
        return response

    # --- reading ------------------------------------------------------------------------------------

    @blueprint.get("/")
    def home() -> ResponseReturnValue:
        return redirect(url_for("console.search"))

    @blueprint.get("/search")
    def search() -> ResponseReturnValue:
        query = request.args.get("q", "").strip()
        collection = request.args.get("collection") or None
        results: list[dict[str, Any]] = []
        if query and tools.usable(principal(), "kb_search"):
            arguments: dict[str, Any] = {"query": query, "top": 30}
            if collection:
                arguments["collection"] = collection
            results = list(_best_per_document(call("kb_search", arguments)["results"]))
        return render_template("search.html", title=f"Search: {query}" if query else "Search", query=query,
                               collection=collection or "", results=results, searched=bool(query))

    @blueprint.get("/collections")
    def collections_page() -> ResponseReturnValue:
        found = call("kb_collections", {})["collections"]
        return render_template("collections.html", title="Collections", collections=found)

    @blueprint.get("/collections/<name>")
    def collection_page(name: str) -> ResponseReturnValue:
        listed = call("kb_list", {"collection": name, "limit": 100, **({"cursor": request.args["cursor"]} if request.args.get("cursor") else {})})
        return render_template("collection.html", title=f"Collection {name}", name=name, listed=listed)

    @blueprint.get("/documents/<int:document_id>")
    def document(document_id: int) -> ResponseReturnValue:
        found = call("kb_get", {"document_id": document_id})["documents"][0]
        return render_template("document.html", title=found["title"] or f"Document {document_id}", doc=found,
                               text=found.get("content") or "", version=found["version"], conflict=None, saved=request.args.get("saved"))

    @blueprint.post("/documents/<int:document_id>")
    def save(document_id: int) -> ResponseReturnValue:
        tools.require(principal(), "kb_update_note")
        text = request.form.get("text", "")
        version = request.form.get("version", "")
        if not version.isdigit():
            abort(400, "the form lost the version it loaded; reload the page")
        try:
            call("kb_update_note", {"document_id": document_id, "text": text, "expected_version": int(version)})
        except Conflict as exc:
            if exc.code != "CONFLICT":
                raise
            current = call("kb_get", {"document_id": document_id})["documents"][0]
            conflict = (f"This note changed since you loaded it (it is now version {current['version']}). "
                        "Nothing was overwritten; your text is kept below. Copy it, reload the note, and apply your change again.")
            return render_template("document.html", title=current["title"] or f"Document {document_id}", doc=current,
                                   text=text, version=int(version), conflict=conflict, saved=None), 409
        return redirect(url_for("console.document", document_id=document_id, saved="1"))

    @blueprint.route("/documents/<int:document_id>/delete", methods=["GET", "POST"])
    def delete(document_id: int) -> ResponseReturnValue:
        tools.require(principal(), "kb_delete")  # before anything is read: no confirmation page for nothing
        found = call("kb_get", {"document_id": document_id})["documents"][0]
        if request.method == "GET" or request.form.get("confirmed") != "yes":
            return render_template("delete.html", title="Delete a document", doc=found)
        call("kb_delete", {"document_id": document_id})
        return render_template("deleted.html", title="Deleted", doc=found)

    @blueprint.get("/jobs")
    def jobs() -> ResponseReturnValue:
        listed = call("kb_jobs", {"limit": 50})
        return render_template("jobs.html", title="Jobs", jobs=listed["jobs"])

    @blueprint.get("/jobs/<int:job_id>")
    def job(job_id: int) -> ResponseReturnValue:
        # kb_jobs is the tool that shows jobs: without it (or without kb:read) 403 before the job is looked up,
        # so the answer says nothing of whether the job exists. A job out of reach is NOT_FOUND, word for word
        # as a missing one.
        tools.require(principal(), "kb_jobs")
        with bridge.engine.deadline(bridge.settings.engine.call_deadline()):
            found = reach.visible_job(bridge.engine, principal(), job_id)
        if wants_json():
            return jsonify(found)
        return render_template("job.html", title=f"Job {job_id}", job=found)

    # --- uploading -----------------------------------------------------------------------------------

    @blueprint.get("/upload")
    def upload_page() -> ResponseReturnValue:
        tools.require(principal(), *UPLOAD_TOOLS)
        names = [c["name"] for c in call("kb_collections", {})["collections"]] if tools.usable(principal(), "kb_collections") else []
        if principal().collections is not None:
            names = sorted(principal().collections or ())
        elif collection_names.DEFAULT not in names:
            names = [collection_names.DEFAULT, *names]
        return render_template("upload.html", title="Upload", collections=names,
                               extensions=", ".join(bridge.settings.uploads.extensions))

    @blueprint.post("/upload")
    def upload() -> ResponseReturnValue:
        tools.require(principal(), *UPLOAD_TOOLS)
        file = request.files.get("file")
        if file is None or not file.filename:
            raise InvalidArgument("file", "choose a file to upload")
        stream = file.stream
        stream.seek(0, 2)
        size = stream.tell()
        if size == 0:
            raise InvalidArgument("file", "is empty")
        # The upload tools, as an agent runs them: the same checks (type, size, collection), the same staging,
        # the same per-caller limits (KB_UPLOAD_MAX_PER_CALLER, KB_UPLOAD_MAX_STAGED_BYTES).
        started = call("kb_upload_start", {"filename": file.filename, "total_size": size,
                                           "collection": request.form.get("collection") or collection_names.DEFAULT})
        upload_id = str(started["upload_id"])
        try:
            stream.seek(0)
            for index, piece in enumerate(iter(lambda: stream.read(int(started["max_chunk_bytes"])), b"")):
                call("kb_upload_chunk", {"upload_id": upload_id, "chunk_index": index,
                                         "data": base64.b64encode(piece).decode("ascii")})
            finished = call("kb_upload_finish", {"upload_id": upload_id})
        except BaseException:
            _abandon(upload_id)
            raise
        sent = {"id": finished["job_id"], "status": finished["status"], "filename": finished["filename"]}
        url = url_for("console.job", job_id=sent["id"]) if tools.usable(principal(), "kb_jobs") else None
        if wants_json():
            return jsonify(job=sent, url=url)
        if url is not None:
            return redirect(url)
        return render_template("uploaded.html", title="Uploaded", job=sent)

    def _abandon(upload_id: str) -> None:
        """Free the staged bytes and the caller's upload slot of a console upload that failed part way (the
        person sends the file again; nobody resumes it)."""
        try:
            bridge.uploads.cancel(upload_id, principal().owner)
        except KbError:
            logger.warning("could not cancel the failed console upload %s; it expires with the upload TTL", upload_id)

    return blueprint


def _best_per_document(hits: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    seen: set[int] = set()
    for hit in hits:
        if hit["document_id"] in seen:
            continue
        seen.add(hit["document_id"])
        text = " ".join(str(hit.get("text") or "").split())
        yield {**hit, "snippet": text if len(text) <= SNIPPET else text[: SNIPPET - 1] + "…"}
