"""The upload store interface: what the upload tools need, whatever holds the bytes.

Every method takes the caller id: an upload belongs to the token that started it, and an id
asked for by anyone else is "not found", exactly like an id that never existed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from kb_bridge.errors import Conflict, InvalidArgument, LimitExceeded


@dataclass
class Upload:
    """An upload's metadata (not its bytes)."""

    upload_id: str
    owner: str
    filename: str
    total_size: int
    tags: list[str]
    collection: str
    title: str | None = None
    source_path: str | None = None
    sha256: str | None = None  # expected sha256 of the whole file, when the agent gave one
    created_at: float = field(default_factory=time.time)
    result: dict[str, Any] | None = None  # the finish result, once finished

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Upload:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class Progress:
    """What has arrived so far."""

    chunks: dict[int, int]  # index -> size in bytes
    last_activity: float

    @property
    def received_bytes(self) -> int:
        return sum(self.chunks.values())


def too_many_uploads(in_progress: int, limit: int) -> LimitExceeded:
    return LimitExceeded(
        f"you have {in_progress} uploads in progress (the limit is {limit}); finish or cancel them "
        "(kb_upload_status lists them, kb_upload_cancel frees one), or let them expire",
        limit="uploads", in_progress=in_progress,
    )


def too_many_bytes(reserved: int, limit: int) -> LimitExceeded:
    return LimitExceeded(
        f"uploads in progress already reserve {reserved} bytes; this one would pass the limit of {limit} bytes "
        "per caller", limit="staged_bytes",
    )


def lock_busy(name: str) -> Conflict:
    return Conflict(f"another request holds {name!r} (for instance a move of the same document); try again shortly")


def beyond_total_size(would_have: int, total_size: int) -> InvalidArgument:
    return InvalidArgument("data", f"this chunk would bring the upload to {would_have} bytes, more than total_size {total_size}")


class UploadStore(Protocol):
    def create(self, upload: Upload, max_uploads: int, max_staged_bytes: int) -> None:
        """Record a new upload; LimitExceeded when the owner is over a per-caller limit."""

    def get(self, upload_id: str, owner: str) -> Upload:
        """The upload, or NotFound (missing, expired, malformed id, or another owner's)."""

    def progress(self, upload_id: str, owner: str) -> Progress: ...

    def put_chunk(self, upload_id: str, owner: str, index: int, data: bytes) -> Progress:
        """Store one chunk atomically. The same bytes again: no-op. Other bytes: Conflict."""

    def finishing(self, upload_id: str, owner: str) -> AbstractContextManager[Upload]:
        """Hold the upload exclusively while it is finished (no chunk lands meanwhile)."""

    def read_chunks(self, upload_id: str, owner: str, count: int) -> Iterator[bytes]:
        """The bytes of chunks 0..count-1 in order, in blocks, without loading the file."""

    def mark_finished(self, upload_id: str, owner: str, result: dict[str, Any]) -> None:
        """Remember the finish result (for an idempotent second finish) and drop the bytes."""

    def cancel(self, upload_id: str, owner: str) -> Upload | None:
        """Remove an unfinished upload and its bytes at once (its slot and reservation are free again).
        Returns the upload as it was, or None when there is none; a finished upload is kept and returned
        (its `result` says so). Waits for a finish in progress."""

    def open_uploads(self, owner: str) -> list[tuple[Upload, Progress]]:
        """The owner's unfinished uploads with what has arrived, oldest first."""

    def sweep(self, ttl_seconds: float, now: float | None = None) -> int:
        """Remove uploads idle for longer than the TTL; never one in use. Returns how many."""

    def stats(self) -> tuple[int, int]:
        """(uploads in progress, bytes staged) across every caller, for metrics."""

    def lock(self, name: str, timeout: float) -> AbstractContextManager[None]:
        """Hold a named lock that every worker sharing this store respects (the store is the bridge's one
        piece of shared state, so it also lends locks, e.g. to serialise moves of one document). `name` is
        ours, never an agent's. Conflict when it stays taken for `timeout` seconds."""
