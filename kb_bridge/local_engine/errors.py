"""The engine's one exception hierarchy; the HTTP layer turns each into the contract's error body.

Every error carries the stable `code` and HTTP `status` of docs/engine-api.md, so the translation is a single
handler (api/errors.py). Messages are written by us and safe to show a client.
"""

from __future__ import annotations


class EngineError(Exception):
    """Root of every error the engine raises on purpose. `field` names the request's field at fault, when one is
    (the error body's `field`, docs/engine-api.md), so that a client can say which of its own values to fix."""

    code = "internal"
    status = 500

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class BadRequest(EngineError):
    code = "bad_request"
    status = 400


class Unauthorized(EngineError):
    code = "unauthorized"
    status = 401


class Forbidden(EngineError):
    code = "forbidden"
    status = 403


class NotFound(EngineError):
    code = "not_found"
    status = 404


class Conflict(EngineError):
    code = "conflict"
    status = 409


class NotANote(Conflict):
    code = "not_a_note"


class MisdirectedRequest(EngineError):
    code = "misdirected_request"
    status = 421


class PreconditionFailed(EngineError):
    code = "precondition_failed"
    status = 412


class PayloadTooLarge(EngineError):
    code = "payload_too_large"
    status = 413


class UnsupportedMediaType(EngineError):
    code = "unsupported_media_type"
    status = 415


class ValidationError(EngineError):
    code = "validation_error"
    status = 422


class NotReady(EngineError):
    code = "not_ready"
    status = 503


class StoreUnavailable(NotReady):
    """The database cannot be reached (PostgreSQL down or unreachable): 503 until it is back."""

    code = "store_unavailable"


class StorageFull(EngineError):
    """The data directory's disk is full (or a file reached RLIMIT_FSIZE): what the request or job wrote was
    rolled back (store/sqlite/db.py, api/errors.py tell it from SQLite's or the file system's own error)."""

    code = "storage_full"
    status = 507

    def __init__(self, reason: str) -> None:
        super().__init__(f"the engine's data directory is full ({reason}); nothing was stored: free space there")


def sqlite_full(error: BaseException) -> bool:
    """SQLite's own error for a database that could not grow (SQLITE_FULL: a full disk, or `max_page_count`),
    the one sign of it both the store's transactions (store/sqlite/db.py) and the HTTP layer (api/errors.py) read."""
    import sqlite3

    return isinstance(error, sqlite3.OperationalError) and getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL


class IndexWriteFailed(EngineError):
    """The full-text index could not be written (a full disk): the change is in the database, and is applied
    to the index again at the next write (store/text_index.py). 500, `internal`, with a message that says so."""


class IngestionError(EngineError):
    """A document's content cannot be turned into text; becomes a failed job's error message."""

    code = "ingestion_failed"
    status = 422


class ConfigError(EngineError):
    """A configuration value is invalid; the message names the variable or option."""

    code = "config_error"


class DataDirInUse(EngineError):
    """Another engine process holds the data directory."""

    code = "data_dir_in_use"


class DataDirUnusable(EngineError):
    """The data directory or its database cannot be written (a read-only mount, another user's files, a file
    where the directory should be): the command line says so in one line before serving (datadir.py)."""

    code = "data_dir_unusable"
