"""The web console at /ui/: people see and fix what agents stored, through the same tool handlers the MCP
tools run (so a token's scopes and collections limit the console exactly as they limit an agent).

Server-rendered pages that work without JavaScript; console.js only adds upload progress, the live job
status and the delete confirmation. Sessions are server-side (sessions.py); every state-changing request
carries the session's CSRF token (a form field or the X-CSRF-Token header), else 403 and nothing changes.
Sign-in itself is protected by a double-submit token (a short-lived cookie and the same value in the form).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable, Iterator
from typing import Any

from flask import Blueprint, Response, abort, g, jsonify, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from werkzeug.wrappers import Response as WerkzeugResponse

from kb_bridge import collections as collection_names
from kb_bridge import shapes
from kb_bridge.auth.bearer import Authenticator
from kb_bridge.auth.principal import ANONYMOUS, DELETE, READ, WRITE, Principal
from kb_bridge.errors import Conflict, Forbidden, InvalidArgument, KbError, NotFound
from kb_bridge.runtime import Bridge
from kb_bridge.tools import reach, registry
from kb_bridge.tools.spec import Result, ToolContext
from kb_bridge.uploads.multipart import file_job_body
from kb_bridge.uploads.names import check_type, safe_filename
from kb_bridge.web.console.sessions import SESSION_SECONDS, Sessions

COOKIE = "kb_console"
PRE_COOKIE = "kb_console_signin"
SNIPPET = 300
_STATUS = {"NOT_FOUND": 404, "FORBIDDEN": 403, "VALIDATION_ERROR": 400, "CONFLICT": 409, "NOT_A_NOTE": 409,
           "TOO_LARGE": 413, "UNSUPPORTED_TYPE": 415}


def console_blueprint(bridge: Bridge, authenticator: Authenticator) -> Blueprint:
    blueprint = Blueprint("console", __name__, url_prefix="/ui", template_folder="templates", static_folder="static")
    sessions = Sessions.for_settings(bridge.settings)
    secure_public = (bridge.settings.mcp.oauth.public_url or "").startswith("https://")

    def call(tool: str, arguments: dict[str, Any]) -> Result:
        ctx = ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings,
                          principal=g.session.principal)
        with ctx.engine.deadline(bridge.settings.engine.call_deadline()):
            return registry.call(ctx, tool, arguments)

    def secure() -> bool:
        return request.is_secure or secure_public

    @blueprint.before_request
    def load_session() -> ResponseReturnValue | None:
        g.session = sessions.find(request.cookies.get(COOKIE))
        if request.endpoint in ("console.sign_in", "console.static"):
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

    @blueprint.after_request
    def headers(response: Response) -> Response:
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
        principal = session.principal if session else None
        return {"session": session, "principal": principal,
                "can_write": bool(principal and principal.can(WRITE)), "can_delete": bool(principal and principal.can(DELETE)),
                "csrf": session.csrf if session else ""}

    @blueprint.errorhandler(KbError)
    def kb_error(exc: KbError) -> ResponseReturnValue:
        return render_template("error.html", title="Something went wrong", message=f"{exc.code}: {exc.message}"), _STATUS.get(exc.code, 502)

    def refused(status: int) -> Callable[[Exception], ResponseReturnValue]:
        def handler(exc: Exception) -> ResponseReturnValue:
            message = getattr(exc, "description", "") or "refused"
            if request.accept_mimetypes.best == "application/json":
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
        token = request.form.get("token", "").strip()
        if authenticator.enabled:
            principal, _reason = authenticator.principal(token.encode("utf-8", "surrogateescape")) if token else (None, "")
        else:
            principal = ANONYMOUS  # no auth configured: the console is as open as /mcp (loopback only)
        if principal is None:
            bridge.metrics.auth_failure("console_token_invalid")
            return _sign_in_page("That access token is not valid. Check it and try again."), 401
        session = sessions.start(principal)
        response = redirect(url_for("console.search"))
        response.set_cookie(COOKIE, session.id, max_age=SESSION_SECONDS, httponly=True, samesite="Strict",
                            secure=secure(), path="/ui")
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
        if query and g.session.principal.can(READ):
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
        found = _visible_job(job_id)
        if request.accept_mimetypes.best == "application/json":
            return jsonify(found)
        return render_template("job.html", title=f"Job {job_id}", job=found)

    def _visible_job(job_id: int) -> dict[str, Any]:
        """A job the session may see: any for an unlimited token, else one whose document it sees (or its
        own upload still under way, remembered in the session's uploads)."""
        found = shapes.job(bridge.engine.get_job(job_id))
        principal: Principal = g.session.principal
        if principal.limited and isinstance(found["document_id"], int):
            reach.visible_document(bridge.engine, principal, found["document_id"])
        elif principal.limited and str(job_id) not in request.cookies.get("kb_console_jobs", "").split(","):
            raise NotFound(f"job {job_id} not found")
        return found

    # --- uploading -----------------------------------------------------------------------------------

    @blueprint.get("/upload")
    def upload_page() -> ResponseReturnValue:
        names = [c["name"] for c in call("kb_collections", {})["collections"]] if g.session.principal.can(READ) else []
        principal: Principal = g.session.principal
        if principal.collections is not None:
            names = sorted(principal.collections)
        elif collection_names.DEFAULT not in names:
            names = [collection_names.DEFAULT, *names]
        return render_template("upload.html", title="Upload", collections=names,
                               extensions=", ".join(bridge.settings.uploads.extensions))

    @blueprint.post("/upload")
    def upload() -> ResponseReturnValue:
        principal: Principal = g.session.principal
        if not principal.can(WRITE):
            raise Forbidden(f"this token lacks the {WRITE} scope")
        file = request.files.get("file")
        collection = collection_names.check_name(request.form.get("collection", ""), field="collection")
        reach.require_writable(principal, collection)
        if file is None or not file.filename:
            raise InvalidArgument("file", "choose a file to upload")
        filename = safe_filename(file.filename)
        limits = bridge.settings.uploads
        check_type(filename, limits.extensions, "file")
        stream = file.stream
        stream.seek(0, 2)
        size = stream.tell()
        if size > limits.max_bytes:
            raise InvalidArgument("file", f"must be at most {limits.max_bytes} bytes")

        def pieces() -> Iterator[bytes]:
            stream.seek(0)
            while piece := stream.read(1024 * 1024):
                yield piece

        tags = collection_names.tags_with_collection(collection, [])
        fields = [("tags", tag) for tag in tags] + [("title", filename), ("source_path", f"uploads/{filename}")]
        with bridge.engine.deadline(bridge.settings.engine.upload_timeout):
            raw = bridge.engine.upload_file_job(file_job_body(filename, size, pieces, fields), secrets.token_hex(16))
        job = shapes.job(raw)
        mine = [j for j in request.cookies.get("kb_console_jobs", "").split(",") if j.isdigit()][-20:]
        response: WerkzeugResponse
        if request.accept_mimetypes.best == "application/json":
            response = jsonify(job=job, url=url_for("console.job", job_id=job["id"]))
        else:
            response = redirect(url_for("console.job", job_id=job["id"]))
        response.set_cookie("kb_console_jobs", ",".join([*mine, str(job["id"])]), httponly=True, samesite="Strict",
                            secure=secure(), path="/ui")
        return response

    return blueprint


def _best_per_document(hits: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    seen: set[int] = set()
    for hit in hits:
        if hit["document_id"] in seen:
            continue
        seen.add(hit["document_id"])
        text = " ".join(str(hit.get("text") or "").split())
        yield {**hit, "snippet": text if len(text) <= SNIPPET else text[: SNIPPET - 1] + "…"}
