"""The one error hierarchy of kb-bridge, and its stable codes.

Lower-level failures (requests, the filesystem, Redis) are translated into these once, at the
boundary where they happen; the MCP layer turns any `KbError` into an `is_error` tool result
once. Messages are written by us: they never carry a repr, a URL with credentials, a key or
a stack trace. `details` holds small, safe, structured facts an agent can act on (the field
that was wrong, the current version, the missing chunk indexes).
"""

from __future__ import annotations

from typing import Any, ClassVar


class SettingsError(ValueError):
    """A configuration value is missing or wrong; names the environment variable."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable
        self.problem = problem


class KbError(Exception):
    """Root of every failure a tool call can report to an agent."""

    code: ClassVar[str] = "INTERNAL_ERROR"
    default_message: ClassVar[str] = "the request failed"
    # The HTTP status a web page answers with (web/console/headers.py); a failure past the bridge's own
    # checks (the engine, the staging area) is the bridge failing as a gateway.
    http_status: ClassVar[int] = 502

    def __init__(self, message: str | None = None, **details: Any) -> None:
        super().__init__(message or self.default_message)
        self.message = message or self.default_message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.details}


class Retryable:
    """Marker: the failure is transient and the call may be tried again (if the call is safe)."""


class NeverSent:
    """Marker: the request never reached the engine, so retrying cannot duplicate a write."""


# --- the caller's fault ---------------------------------------------------------------------


class InvalidArgument(KbError):
    code = "VALIDATION_ERROR"
    http_status = 400
    default_message = "an argument is invalid"

    def __init__(self, field: str, problem: str, **details: Any) -> None:
        super().__init__(f"{field}: {problem}" if field else problem, field=field, **details)


class NotFound(KbError):
    code = "NOT_FOUND"
    http_status = 404
    default_message = "not found"


class Forbidden(KbError):
    """The caller's token may not do this: a scope it lacks, or a collection outside its own."""

    code = "FORBIDDEN"
    http_status = 403
    default_message = "this token may not do that"


class Conflict(KbError):
    code = "CONFLICT"
    http_status = 409
    default_message = "the request conflicts with the current state"


class NotANote(Conflict):
    code = "NOT_A_NOTE"
    default_message = "only notes can be updated; this document is a file"


class TooLarge(KbError):
    code = "TOO_LARGE"
    http_status = 413
    default_message = "the content is larger than allowed"


class UnsupportedType(KbError):
    code = "UNSUPPORTED_TYPE"
    http_status = 415
    default_message = "the engine does not accept this file type"


class LimitExceeded(KbError):
    code = "LIMIT_EXCEEDED"
    http_status = 429
    default_message = "a limit was reached"


class UploadIncomplete(Conflict):
    code = "UPLOAD_INCOMPLETE"
    default_message = "the upload is missing chunks"


class UploadExpired(NotFound):
    code = "NOT_FOUND"
    default_message = "upload not found (it may have expired)"


# --- the bridge's environment ---------------------------------------------------------------


class StorageFull(KbError):
    code = "STORAGE_FULL"
    http_status = 507
    default_message = "the upload staging area is full; try again later"


class StorageError(KbError):
    code = "STORAGE_ERROR"
    default_message = "the upload staging area failed"


# --- the engine ------------------------------------------------------------------------------


class EngineFailure(KbError):
    """Base for everything that went wrong on or on the way to the engine."""

    code = "ENGINE_ERROR"
    default_message = "the kb engine failed to handle the request"


class EngineUnavailable(EngineFailure, Retryable):
    code = "ENGINE_UNAVAILABLE"
    default_message = "the kb engine is unreachable; try again shortly"


class EngineConnectFailed(EngineUnavailable, NeverSent):
    default_message = "the kb engine is unreachable (connection failed); try again shortly"


class EngineTimeout(EngineUnavailable):
    code = "ENGINE_TIMEOUT"
    default_message = "the kb engine did not answer in time"


class EngineServerError(EngineFailure, Retryable):
    """The engine answered 500: retried for safe calls, reported as ENGINE_ERROR."""


class EngineBusy(EngineUnavailable):
    """502/503/504/429: transient by definition; may carry a Retry-After."""

    def __init__(self, message: str | None = None, retry_after: float | None = None, **details: Any) -> None:
        super().__init__(message, **details)
        self.retry_after = retry_after


class EngineBadResponse(EngineFailure):
    default_message = "the kb engine returned a response the bridge could not read"


class EngineAuthFailed(EngineFailure):
    code = "ENGINE_AUTH_ERROR"
    default_message = "bridge misconfigured: the kb engine rejected KB_API_KEY"


class EngineUnsupported(EngineFailure):
    code = "ENGINE_UNSUPPORTED"
    default_message = "the kb engine does not support this operation"


class IngestionFailed(EngineFailure):
    code = "INGESTION_FAILED"
    default_message = "the kb engine could not index the content"


class OutcomeUnknown(EngineFailure):
    """A write that may or may not have happened: the agent must check before repeating it."""

    code = "OUTCOME_UNKNOWN"
    default_message = (
        "the kb engine did not confirm the write; it may or may not have been applied "
        "- check with kb_jobs or kb_get before retrying"
    )
