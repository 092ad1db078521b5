"""How engine failures become `kb_bridge.errors`: one table for transport failures (a `requests` exception,
applied by `transport_errors()`), one for the engine's error answers (a status, sometimes with the engine's
error code, applied by `error_for_answer()`).

Whether a failure may be retried travels with the error class (client/retry.py): `NeverSent`
(EngineConnectFailed) is retried for any call, `Retryable` (EngineUnavailable, EngineTimeout, EngineBusy,
EngineServerError) for safe calls only, and the rest never.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import requests
from urllib3.exceptions import MaxRetryError, NewConnectionError, ReadTimeoutError

from kb_bridge.errors import (
    Conflict,
    EngineAuthFailed,
    EngineBusy,
    EngineConnectFailed,
    EngineFailure,
    EngineServerError,
    EngineTimeout,
    EngineUnavailable,
    EngineUnsupported,
    InvalidArgument,
    KbError,
    NotANote,
    NotFound,
    StorageFull,
    TooLarge,
    UnsupportedType,
)

# Engine messages are passed on only for the caller's own mistakes (400/409/422), cut short
# and stripped of control characters: enough to fix the call, never a dump.
_MAX_ENGINE_MESSAGE = 300
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# --- transport failures ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Transport:
    """A `requests` failure (with, for a ConnectionError, the urllib3 error under it), the metrics label of
    the attempt's outcome, and the error the call answers with."""

    caught: type[requests.exceptions.RequestException]
    cause: type[BaseException] | None
    outcome: str
    error: Callable[[], KbError]


# First match wins: ConnectTimeout is both a ConnectionError and a Timeout, so it comes first.
_TRANSPORT = (
    _Transport(requests.exceptions.ConnectTimeout, None, "connect_timeout",
               lambda: EngineConnectFailed("the kb engine is unreachable (connection timed out)")),
    _Transport(requests.exceptions.ConnectionError, ReadTimeoutError, "timeout", EngineTimeout),
    _Transport(requests.exceptions.ConnectionError, NewConnectionError, "connect_error", EngineConnectFailed),
    _Transport(requests.exceptions.ConnectionError, None, "connect_error",
               lambda: EngineUnavailable("the connection to the kb engine broke during the request")),
    _Transport(requests.exceptions.Timeout, None, "timeout", EngineTimeout),
    _Transport(requests.exceptions.ChunkedEncodingError, None, "broken_response",
               lambda: EngineUnavailable("the connection to the kb engine broke during the response")),
    _Transport(requests.exceptions.RequestException, None, "request_error",
               lambda: EngineFailure("the request to the kb engine could not be made")),
)


@dataclass
class Outcome:
    """How one attempt ended, as the metrics and the access log label it: its status code, or the failure."""

    label: str = "error"


@contextmanager
def transport_errors(outcome: Outcome, expired: Callable[[], bool]) -> Iterator[None]:
    """Translate the `requests` failures of the attempt in this block, labelling `outcome`. `expired()` says
    whether the deadline watchdog cut the attempt (client/deadline.py): whatever failure that caused is a
    timeout. Other errors (the bridge's own KbErrors, a non-requests OSError) pass unchanged."""
    try:
        yield
    except (requests.exceptions.RequestException, OSError) as exc:
        if expired():
            outcome.label = "timeout"
            raise EngineTimeout(
                "the kb engine did not answer in time (KB_ENGINE_TIMEOUT), though it kept the connection open"
            ) from None
        row = _transport_row(exc)
        if row is None:
            raise
        outcome.label = row.outcome
        raise row.error() from None


def _transport_row(exc: BaseException) -> _Transport | None:
    cause = _root_cause(exc) if isinstance(exc, requests.exceptions.ConnectionError) else None
    for row in _TRANSPORT:
        if isinstance(exc, row.caught) and (row.cause is None or isinstance(cause, row.cause)):
            return row
    return None


def _root_cause(exc: requests.exceptions.ConnectionError) -> BaseException | None:
    """The urllib3 error under a requests ConnectionError (requests wraps it in MaxRetryError)."""
    cause = exc.args[0] if exc.args else None
    if isinstance(cause, MaxRetryError):
        cause = cause.reason
    return cause if isinstance(cause, BaseException) else None


# --- the engine's error answers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """An engine error answer as the table's factories need it."""

    status: int
    message: str  # the engine's own message, fit to pass on (clean_message); "" when it gave none
    field: str  # the request field the engine named (engine 3.16, docs/engine-api.md); "" when it named none
    what: str  # what the request named, for NOT_FOUND: "document 42"
    endpoint: str  # the path template: "GET /api/v1/documents/{id}"
    retry_after: float | None


def _busy(answer: Answer) -> KbError:
    return EngineBusy(retry_after=answer.retry_after)


def _rejected(answer: Answer) -> KbError:
    # The engine's name for the value it refused: the tool's argument of that name where the tool has one (text,
    # title, tags, source_path ...). The bridge checks its arguments first, so this is the engine's own rule.
    return InvalidArgument(answer.field, "the engine rejected the request: " + (answer.message or "invalid input"))


# An engine error code refines its status; otherwise the status alone decides.
_BY_CODE: dict[tuple[int, str], Callable[[Answer], KbError]] = {
    (409, "not_a_note"): lambda a: NotANote(),
    # The engine answered, its database did not (PostgreSQL away, docs/engine-api.md): "the kb engine is
    # unreachable" sent whoever read it (an agent, /readyz, an operator) after the engine's network.
    (503, "store_unavailable"): lambda a: EngineBusy("the kb engine answers, but its database is unavailable; try "
                                                     "again shortly", retry_after=a.retry_after),
}
_BY_STATUS: dict[int, Callable[[Answer], KbError]] = {
    400: _rejected,
    401: lambda a: EngineAuthFailed(),
    403: lambda a: EngineAuthFailed(),
    404: lambda a: NotFound(f"{a.what} not found"),
    405: lambda a: EngineUnsupported(f"the kb engine does not offer {a.endpoint}"),
    409: lambda a: Conflict(a.message or "the engine reported a conflict"),
    412: lambda a: Conflict("the document changed since the version you expected", reason="version_mismatch"),
    413: lambda a: TooLarge("the engine refused the content as too large"),
    415: lambda a: UnsupportedType(),
    # The engine's guard refuses a Host it does not answer for (DNS rebinding; docs/engine-api.md): the host in
    # KB_ENGINE_URL, say a compose service name, is not among its KB_ENGINE_ALLOWED_HOSTS.
    421: lambda a: EngineFailure("bridge misconfigured: the kb engine does not answer for the host in KB_ENGINE_URL "
                                 "(add it to the engine's KB_ENGINE_ALLOWED_HOSTS)"),
    422: _rejected,
    429: _busy,
    502: _busy,
    503: _busy,
    504: _busy,
    # The local engine's data directory is full (docs/engine-api.md, 507 storage_full): nothing of the request was
    # stored, so the agent may send it again once an operator has made room (STORAGE_FULL, as for the bridge's
    # own staging area); retrying at once would not help.
    507: lambda a: StorageFull("the kb engine's storage is full and nothing was stored; try again once an "
                               "operator has freed space on the engine's disk"),
}


def error_for_answer(
    status: int, body: bytes, headers: Mapping[str, str], what: str, endpoint: str, clean: Callable[[str | None], str]
) -> KbError:
    """The error an engine answer with `status` >= 400 means; `clean` makes its message fit to pass on."""
    code, message, field = engine_error(body)
    answer = Answer(status, clean(message), _field_name(clean(field)), what, endpoint,
                    retry_after(headers.get("Retry-After")))
    factory = _BY_CODE.get((status, code or "")) or _BY_STATUS.get(status)
    if factory is not None:
        return factory(answer)
    if status >= 500:
        return EngineServerError()
    return EngineFailure(f"the kb engine answered with an unexpected status {status}")


def clean_message(message: str | None, redact: Callable[[str], str]) -> str:
    """An engine's message, fit to pass on: secrets out first (in any case; a cut cannot leave a stub),
    then control characters, then cut short."""
    if not message:
        return ""
    window = message[: 4 * _MAX_ENGINE_MESSAGE]  # redacting a 64 MiB body is not needed to show 300 characters
    return _CONTROL.sub(" ", redact(window))[:_MAX_ENGINE_MESSAGE].strip()


# A field as the engine names it: `text`, `tags[1]`, `versions[0].title`, `Idempotency-Key`.
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\[\]-]{0,99}")


def _field_name(field: str) -> str:
    """The engine's field if it is shaped as a field name, else "": it reaches the agent as `field`."""
    return field if _FIELD_NAME.fullmatch(field) else ""


def engine_error(body: bytes) -> tuple[str | None, str | None, str | None]:
    """(code, message, field) from either engine error shape; None for each part it does not hold."""
    try:
        data = json.loads(body)
    except ValueError:
        return None, None, None
    if not isinstance(data, dict):
        return None, None, None
    error = data.get("error")
    if isinstance(error, dict):
        code, message, field = error.get("code"), error.get("message"), error.get("field")
        return (code if isinstance(code, str) else None, message if isinstance(message, str) else None,
                field if isinstance(field, str) else None)
    detail = data.get("detail")
    if isinstance(detail, str):
        return None, detail, None
    if isinstance(detail, list):
        # FastAPI style: [{"loc": ["body", "query"], "msg": "..."}]
        parts = []
        for item in detail[:5]:
            if isinstance(item, dict):
                loc = ".".join(str(p) for p in item.get("loc", []) if p != "body")
                parts.append(f"{loc}: {item.get('msg', '')}" if loc else str(item.get("msg", "")))
        return None, "; ".join(parts) or None, None
    return None, None, None


def retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds form; an HTTP date is ignored)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
