"""EngineClient: every call the bridge makes to a kb engine (docs/engine-api.md).

One `requests.Session` (pooled connections) per process, the engine key on every request,
the retry policy from client/retry.py, the call's deadline from client/deadline.py, and the
translation of transport failures and engine error responses into the `kb_bridge.errors`
hierarchy from client/translation.py. Methods return the engine's JSON as dicts; shaping it for
agents is the presenters' job.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol
from urllib.parse import quote

import requests
from requests.adapters import HTTPAdapter

from kb_bridge import __version__
from kb_bridge.access_log import note_engine_outcome
from kb_bridge.errors import (
    EngineAuthFailed,
    EngineBadResponse,
    EngineTimeout,
    EngineUnsupported,
    KbError,
    NeverSent,
    NotFound,
    OutcomeUnknown,
    Retryable,
)
from kb_bridge.metrics import Metrics
from kb_bridge.redaction import Redactor
from kb_bridge.client import deadline
from kb_bridge.client.retry import RetryPolicy
from kb_bridge.client.translation import Outcome, clean_message, error_for_answer, transport_errors
from kb_bridge.client.versions import (
    engine_version,
    lacks_keyset_paging,
    lacks_time_filters,
    lacks_versions,
    version_problem,
)
from kb_bridge.settings import EngineSettings

logger = logging.getLogger(__name__)

API = "/api/v1"
# The engine's time bounds (3.8); an engine that applied them says so with `time_filters` in its answer.
TIME_BOUNDS = ("created_after", "created_before", "updated_after", "updated_before")


class StreamedBody(Protocol):
    """A request body sent as a stream with a known length (requests reads it block by block)."""

    @property
    def content_type(self) -> str: ...

    def __len__(self) -> int: ...

    def read(self, n: int = -1) -> bytes: ...


@dataclass(frozen=True)
class Call:
    """One logical engine request (possibly several attempts)."""

    method: str
    path: str
    endpoint: str  # the path template, for logs and metrics: "GET /api/v1/documents/{id}"
    what: str  # what the path names, for NOT_FOUND messages: "document 42"
    retry_safe: bool  # may be retried after it reached the engine (a read, or a write made idempotent)
    write: bool = False  # changes engine state: a failure after it reached the engine leaves the outcome unknown
    params: Mapping[str, Any] | Sequence[tuple[str, Any]] | None = None
    json: Any = None
    headers: Mapping[str, str] | None = None
    timeout: float | None = None
    expect_body: bool = True


class DeadlineExceeded(EngineTimeout, NeverSent):
    """The call's time budget ran out before this attempt could be sent."""

    default_message = "the kb engine did not answer within the call's time budget (KB_ENGINE_TIMEOUT)"


class _WatchedAdapter(HTTPAdapter):
    """requests' adapter over connection pools that tell the deadline watchdog which socket a request uses."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(deadline.POOL_CLASSES)


def segment(value: object) -> str:
    """One URL path segment, with everything that could end or escape it percent-encoded: also the dots of a
    segment that is "." or "..", which URL normalisation (RFC 3986, 5.2.4; urllib3 does it) would remove."""
    encoded = quote(str(value), safe="")
    return encoded.replace(".", "%2E") if encoded in (".", "..") else encoded


class EngineClient:
    """Synchronous, thread-safe client for the kb engine HTTP API."""

    def __init__(
        self,
        settings: EngineSettings,
        session: requests.Session | None = None,
        retry: RetryPolicy | None = None,
        metrics: Metrics | None = None,
        redact: Redactor | None = None,
    ) -> None:
        self.settings = settings
        # Engine messages quoted back to agents lose every piece of every secret first (redaction.py).
        self._redact = redact or Redactor([settings.api_key.reveal()] if settings.api_key else [])
        self._base = settings.url
        self._retry = retry or RetryPolicy(settings)
        self._metrics = metrics or Metrics()
        self._session = session or self._new_session(settings)
        self._watchdog = deadline.Watchdog()

    @staticmethod
    def _new_session(settings: EngineSettings) -> requests.Session:
        session = requests.Session()
        # Retries belong to RetryPolicy alone; the adapter's own must stay off.
        adapter = _WatchedAdapter(pool_connections=4, pool_maxsize=settings.pool_size, max_retries=0)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.headers["User-Agent"] = f"kb-bridge/{__version__}"
        session.headers["Accept"] = "application/json"
        # Proxies from the environment would silently reroute engine traffic.
        session.trust_env = False
        if settings.api_key is not None:
            session.headers["Authorization"] = f"Bearer {settings.api_key.reveal()}"
        return session

    def close(self) -> None:
        self._session.close()

    # --- endpoints ------------------------------------------------------------------------

    def healthz(self) -> dict[str, Any]:
        return self._json(Call("GET", "/healthz", "GET /healthz", "engine health", retry_safe=True))

    def status(self, timeout: float | None = None, retry: bool = True) -> dict[str, Any]:
        call = Call("GET", f"{API}/status", "GET /status", "engine status", retry_safe=True, timeout=timeout)
        # Probes (readiness, `kb-bridge check`) want one quick answer, not the retry budget.
        return self._json(call) if retry else self._parse(self._send(call), call)

    def require_note_updates(self) -> None:
        """EngineUnsupported when the engine is too old to update notes (client/versions.py)."""
        problem = version_problem(self.status())
        if problem is not None:
            raise EngineUnsupported(f"the kb engine cannot serve this: {problem}")

    def search(self, body: Mapping[str, Any]) -> dict[str, Any]:
        # Search changes nothing, so it is as safe to repeat as a GET.
        answer = self._json(Call("POST", f"{API}/search", "POST /search", "search", retry_safe=True, json=dict(body)))
        return self._time_filtered(any(key in body for key in TIME_BOUNDS), answer)

    def _time_filtered(self, asked: bool, answer: dict[str, Any]) -> dict[str, Any]:
        """The answer, unless time bounds were asked for and the engine did not apply them: an engine before
        3.8 ignores them, and its unfiltered results must never pass for filtered ones. Checked on the
        answer itself, not on a version read earlier, so that one old replica behind a balancer is caught."""
        if asked and not isinstance(answer.get("time_filters"), dict):
            status = self.status()
            raise EngineUnsupported(lacks_time_filters(status), engine_version=engine_version(status) or None)
        return answer

    def create_note_job(self, body: Mapping[str, Any], idempotency_key: str) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key}
        call = Call("POST", f"{API}/jobs", "POST /jobs", "note", retry_safe=True, write=True, json=dict(body), headers=headers)
        return self._json(call)

    def upload_file_job(self, body: Callable[[], StreamedBody], idempotency_key: str) -> dict[str, Any]:
        """Stream a file to the engine (multipart); `body()` makes a fresh body for each attempt, so a
        retry starts again from byte 0."""

        call = Call("POST", f"{API}/jobs", "POST /jobs (file)", "file upload", retry_safe=True, write=True)

        def attempt() -> dict[str, Any]:
            streamed = body()
            headers = {"Idempotency-Key": idempotency_key, "Content-Type": streamed.content_type}
            sent = self._send(replace(call, headers=headers), data=streamed, timeout=self.settings.upload_timeout)
            return self._parse(sent, call)

        # Streaming a large file takes longer than any JSON call: it has a budget of its own.
        with deadline.within(1.5 * self.settings.upload_timeout):
            return self._run(attempt, call)

    def list_jobs(self, status: str | None, limit: int, offset: int = 0) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if status:
            params["status"] = status
        return self._json(Call("GET", f"{API}/jobs", "GET /jobs", "jobs", retry_safe=True, params=params))

    def get_job(self, job_id: int) -> dict[str, Any]:
        path = f"{API}/jobs/{segment(job_id)}"
        return self._json(Call("GET", path, "GET /jobs/{id}", f"job {job_id}", retry_safe=True))

    def cancel_job(self, job_id: int) -> dict[str, Any]:
        """Take back a queued job (engine 3.10): the job, now cancelled; Conflict once it runs; an older
        engine's 405 is EngineUnsupported. A repeat answers the same, so retrying is safe."""
        path = f"{API}/jobs/{segment(job_id)}"
        return self._json(Call("DELETE", path, "DELETE /jobs/{id}", f"job {job_id}", retry_safe=True, write=True))

    def list_documents(self, params: Sequence[tuple[str, Any]]) -> dict[str, Any]:
        """A page of documents; with `after` (engine 3.14) the page after that key, which the answer names."""
        answer = self._json(Call("GET", f"{API}/documents", "GET /documents", "documents", retry_safe=True, params=params))
        answer = self._time_filtered(any(key in TIME_BOUNDS for key, _ in params), answer)
        # As for time bounds, checked on the answer: an engine (or one replica) before 3.14 ignores `after`
        # and answers the listing's first page, which must never pass for the page after the key.
        if any(key == "after" for key, _ in params) and answer.get("after") is None:
            status = self.status()
            raise EngineUnsupported(lacks_keyset_paging(status), engine_version=engine_version(status) or None)
        return answer

    def get_document(self, document_id: int) -> dict[str, Any]:
        path = f"{API}/documents/{segment(document_id)}"
        return self._json(Call("GET", path, "GET /documents/{id}", f"document {document_id}", retry_safe=True))

    def list_versions(self, document_id: int) -> dict[str, Any]:
        """A document's kept versions, newest first (engine 3.9)."""
        path = f"{API}/documents/{segment(document_id)}/versions"
        return self._json(Call("GET", path, "GET /documents/{id}/versions", f"document {document_id}", retry_safe=True))

    def get_version(self, document_id: int, version: int) -> dict[str, Any]:
        """A document as it was at `version`, with its text (engine 3.9)."""
        path = f"{API}/documents/{segment(document_id)}"
        # A 404 here is the version missing (kb_get reads the document first): named so, not as the document.
        answer = self._json(Call("GET", path, "GET /documents/{id}?version", f"version {version} of document {document_id}",
                                 retry_safe=True, params={"version": version}))
        # An engine before 3.9 ignores `version` and answers the document as it is now, which must never pass
        # for the version asked for: checked on the answer, as for time bounds, so an old replica is caught.
        if answer.get("version") != version:
            status = self.status()
            raise EngineUnsupported(lacks_versions(status, version), engine_version=engine_version(status) or None)
        return answer

    def restore_versions(self, document_id: int, versions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Replace a note's earlier versions (import; engine 3.9). A PUT: repeating it changes nothing more."""
        path = f"{API}/documents/{segment(document_id)}/versions"
        call = Call("PUT", path, "PUT /documents/{id}/versions", f"document {document_id}", retry_safe=True, write=True,
                    json={"versions": [dict(v) for v in versions]})
        return self._json(call)

    def delete_document(self, document_id: int, if_match: int | None = None) -> None:
        """Delete a document; NotFound when it was not there; with `if_match` (engine 3.15) only at that version
        (Conflict, reason version_mismatch). DELETE is idempotent by definition, so it is retried: a repeat
        finds nothing and says 404. After an attempt that may have reached the engine (its answer lost: the
        engine restarting after it deleted), that 404 is the earlier attempt's deletion, not a document that
        was never there."""
        call = Call(
            "DELETE", f"{API}/documents/{segment(document_id)}", "DELETE /documents/{id}", f"document {document_id}",
            retry_safe=True, write=True, headers=_if_match(if_match),
        )
        reached = False

        def attempt() -> None:
            nonlocal reached
            try:
                self._send(call)
            except NotFound:
                if not reached:
                    raise
            except KbError as exc:
                reached = reached or not isinstance(exc, NeverSent)
                raise

        self._run(attempt, call)

    def patch_note(self, document_id: int, body: Mapping[str, Any], if_match: int | None) -> dict[str, Any]:
        headers = _if_match(if_match)
        path = f"{API}/notes/{segment(document_id)}"
        # Without If-Match a repeat could overwrite someone else's change made in between.
        call = Call(
            "PATCH", path, "PATCH /notes/{id}", f"document {document_id}", retry_safe=if_match is not None, write=True,
            json=dict(body), headers=headers,
        )
        return self._json(call)

    def move_document(self, document_id: int, source_path: str, title: str, if_match: int | None) -> dict[str, Any]:
        """A new source_path and title in place, nothing re-embedded (PATCH /documents/{id}, an addition)."""
        headers = _if_match(if_match)
        path = f"{API}/documents/{segment(document_id)}"
        # Setting both fields to given values is idempotent: a repeat changes nothing more.
        call = Call(
            "PATCH", path, "PATCH /documents/{id}", f"document {document_id}", retry_safe=True, write=True,
            json={"source_path": source_path, "title": title}, headers=headers,
        )
        return self._json(call)

    def add_tags(self, document_id: int, tags: Sequence[str]) -> dict[str, Any]:
        path = f"{API}/documents/{segment(document_id)}/tags"
        call = Call(
            "POST", path, "POST /documents/{id}/tags", f"document {document_id}", retry_safe=True, write=True, json={"tags": list(tags)}
        )
        return self._json(call)

    def remove_tag(self, document_id: int, tag: str) -> dict[str, Any]:
        path = f"{API}/documents/{segment(document_id)}/tags/{segment(tag)}"
        call = Call("DELETE", path, "DELETE /documents/{id}/tags/{tag}", f"document {document_id}", retry_safe=True, write=True)
        return self._json(call)

    def patch_tags(self, document_id: int, add: Sequence[str], remove: Sequence[str], if_match: int | None) -> dict[str, Any]:
        """Add and remove tags in one engine step (engine 3.1+): one version step, If-Match honoured."""
        headers = _if_match(if_match)
        path = f"{API}/documents/{segment(document_id)}/tags"
        call = Call(
            "PATCH", path, "PATCH /documents/{id}/tags", f"document {document_id}", retry_safe=if_match is not None,
            write=True, json={"add": list(add), "remove": list(remove)}, headers=headers,
        )
        return self._json(call)

    def get_original(self, document_id: int) -> tuple[bytes, str]:
        """(the bytes, their content type) of a file as uploaded, or a note's text (engine 3.6)."""
        path = f"{API}/documents/{segment(document_id)}/original"
        call = Call("GET", path, "GET /documents/{id}/original", f"original of document {document_id}", retry_safe=True,
                    expect_body=False)
        response = self._run(lambda: self._send(call), call)
        return response.content, response.headers.get("Content-Type", "application/octet-stream")

    def list_tags(self, prefix: str | None = None, within: str | None = None) -> dict[str, Any]:
        """Tags with document counts; `within` (engine 3.12) counts only documents that also carry that tag,
        and the answer names it (an older engine's answer does not: it counted every document)."""
        params = {key: value for key, value in (("prefix", prefix), ("within", within)) if value} or None
        return self._json(Call("GET", f"{API}/tags", "GET /tags", "tags", retry_safe=True, params=params))

    def get_chunk(self, chunk_id: int) -> dict[str, Any]:
        path = f"{API}/chunks/{segment(chunk_id)}"
        return self._json(Call("GET", path, "GET /chunks/{id}", f"chunk {chunk_id}", retry_safe=True))

    def related_chunks(self, chunk_id: int, top_n: int, same_document: bool = False,
                       tags: Sequence[str] = ()) -> dict[str, Any]:
        """`tags` (engine 3.16): only chunks of documents carrying all of them; the answer's `tags` says they were
        applied (an engine before ignores them)."""
        path = f"{API}/chunks/{segment(chunk_id)}/related"
        params: dict[str, Any] = {"top_n": top_n}
        if same_document:
            params["same_document"] = "true"
        if tags:
            params["tag"] = list(tags)
        return self._json(Call("GET", path, "GET /chunks/{id}/related", f"chunk {chunk_id}", retry_safe=True, params=params))

    # --- the machinery ----------------------------------------------------------------------

    def _json(self, call: Call) -> dict[str, Any]:
        return self._run(lambda: self._parse(self._send(call), call), call)

    def deadline(self, seconds: float) -> AbstractContextManager[float]:
        """Every engine request in this block (retries and waits included) is done within `seconds`."""
        return deadline.within(seconds)

    def _run(self, attempt: Callable[[], Any], call: Call) -> Any:
        if deadline.current() is None:  # not inside a tool call: this request alone gets the budget
            with deadline.within(1.5 * call.timeout if call.timeout else self.settings.call_deadline()):
                return self._run_within(attempt, call)
        return self._run_within(attempt, call)

    def _run_within(self, attempt: Callable[[], Any], call: Call) -> Any:
        attempts = 0
        reached = False  # did any attempt possibly reach the engine?

        def counted() -> Any:
            nonlocal attempts, reached
            attempts += 1
            if attempts > 1:
                self._metrics.engine_retry(call.endpoint)
            try:
                return attempt()
            except KbError as exc:
                reached = reached or not isinstance(exc, NeverSent)
                raise

        try:
            return self._retry.run(counted, safe=call.retry_safe)
        except KbError as exc:
            if call.write and reached and isinstance(exc, Retryable):
                # A write that may have been applied and was never confirmed: say so rather than
                # invite a repeat that could apply it twice.
                raise OutcomeUnknown() from exc
            raise

    def _send(self, call: Call, data: Any = None, timeout: float | None = None) -> requests.Response:
        """One attempt: send, translate transport errors, check the status, read the body; all of it within
        what is left of the call's deadline (client/deadline.py)."""
        call_end = deadline.current()
        now = time.monotonic()
        if call_end is not None and call_end <= now:
            note_engine_outcome("deadline")
            raise DeadlineExceeded()
        read_timeout = timeout or call.timeout or self.settings.read_timeout
        # The attempt as a whole (not each read) ends after read_timeout, or at the call's deadline if sooner.
        end = now + read_timeout if call_end is None else min(call_end, now + read_timeout)
        left = end - now
        read_timeout, connect_timeout = min(read_timeout, left), min(self.settings.connect_timeout, left)
        started = time.perf_counter()
        outcome = Outcome()
        headers = {**self._session.headers, **call.headers} if call.headers else self._session.headers
        try:
            with self._watchdog.watching(end) as attempt, transport_errors(outcome, lambda: attempt.expired):
                response = self._attempt(call, data, headers, connect_timeout, read_timeout)
            outcome.label = str(response.status_code)
        finally:
            self._metrics.engine_request(call.endpoint, outcome.label, time.perf_counter() - started)
            note_engine_outcome(outcome.label)
        if response.status_code >= 400:
            raise self._error_for(response, call)
        return response

    def _attempt(
        self, call: Call, data: Any, headers: Mapping[str, Any], connect_timeout: float, read_timeout: float
    ) -> requests.Response:
        # Prepared here and handed to send(): Session.request would merge environment,
        # cookie and proxy settings the bridge never uses, on every call (~15 % of its cost).
        prepared = requests.Request(
            call.method, self._base + call.path, params=call.params, json=call.json, data=data, headers=headers
        ).prepare()
        response = self._session.send(prepared, timeout=(connect_timeout, read_timeout), stream=True, allow_redirects=False)
        try:
            response._content = self._read_capped(response)  # noqa: SLF001 - cached for .json()
        finally:
            response.close()
        return response

    def _read_capped(self, response: requests.Response) -> bytes:
        cap = self.settings.max_response_bytes
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > cap:
            raise EngineBadResponse("the kb engine's response was larger than allowed")
        body = bytearray()
        for piece in response.iter_content(64 * 1024):
            body += piece
            if len(body) > cap:
                raise EngineBadResponse("the kb engine's response was larger than allowed")
        return bytes(body)

    def _parse(self, response: requests.Response, call: Call) -> dict[str, Any]:
        if not call.expect_body or response.status_code == 204:
            return {}
        try:
            data = json.loads(response.content)
        except ValueError:
            raise EngineBadResponse() from None
        if not isinstance(data, dict):
            raise EngineBadResponse()
        return data

    def _error_for(self, response: requests.Response, call: Call) -> KbError:
        clean = partial(clean_message, redact=self._redact)
        error = error_for_answer(response.status_code, response.content, response.headers, call.what, call.endpoint, clean)
        if isinstance(error, EngineAuthFailed) and self.settings.api_key is None:
            # Not "rejected KB_API_KEY": there is none, and whoever reads this should set it, not change it.
            return EngineAuthFailed("bridge misconfigured: the kb engine wants a key and KB_API_KEY is not set")
        return error


def _if_match(version: int | None) -> dict[str, str] | None:
    """The header that makes a write conditional on the version read (None: unconditional)."""
    return {"If-Match": f'"{version}"'} if version is not None else None
