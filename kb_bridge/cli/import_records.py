"""The records of a `kb-bridge import` file: read one line at a time, checked, each with its own key.

Only the line being read is in memory (with its file's bytes decoded), so an export larger than memory
imports. A line that is not JSON, a field of the wrong type, or a record without what it needs is reported
by its line number and skipped; the others import.

Each record carries an Idempotency-Key derived from the record itself (a digest of its canonical JSON), so
the same file sent again asks the engine for the same jobs: within the engine's idempotency window (24 h
for the local engine) a record already queued, running or done is answered with its first job instead of
making a second document.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, BinaryIO

from kb_bridge import collection_tags
from kb_bridge.cli.history import check_history
from kb_bridge.errors import InvalidArgument

KEY_PREFIX = "kb-import-"
# Fields import reads, each a string when present (null is the same as absent).
STRING_FIELDS = ("collection", "title", "source_path", "doc_type", "text", "filename", "content_type",
                 "original_base64", "created_at", "updated_at")
TIME_FIELDS = ("created_at", "updated_at")


@dataclasses.dataclass(frozen=True)
class Record:
    """What import needs of one line of the file."""

    line: int
    collection: str | None
    tags: list[str]
    title: str | None
    source_path: str | None
    text: str | None  # a note's text
    filename: str | None  # a file's name
    data: bytes | None  # a file's bytes; None for a note
    sha256: str  # of the content as the engine stores it: the note's text (UTF-8) or the file's bytes
    key: str  # the Idempotency-Key of its job
    created_at: str | None = None  # the document's times, kept by an engine 3.8 or newer
    updated_at: str | None = None
    history: tuple[dict[str, Any], ...] = ()  # a note's earlier versions (export --history)

    @property
    def is_note(self) -> bool:
        return self.data is None

    @property
    def identity(self) -> tuple[str | None, ...]:
        """What makes it the same document as a stored one (stored_identity)."""
        return stored_identity(self.collection, self.source_path, self.title, self.sha256)


def stored_identity(collection: str | None, source_path: str | None, title: str | None,
                    sha256: str | None) -> tuple[str | None, ...]:
    """A document is already stored when its collection holds one at the same source_path or, without a
    source_path, one with the same title and content. The content alone is not enough: distinct notes
    often share a text (a one-line preference saved under two titles, the same text in two collections)."""
    if source_path:
        return ("path", collection, source_path)
    return ("content", collection, title, sha256)


def read_records(handle: BinaryIO, failed: Callable[[int, str], None], progress: Callable[[int], object]) -> Iterator[Record]:
    """The valid records read from `handle` in order; each invalid line goes to `failed(line, reason)`;
    `progress` gets the bytes of each line read."""
    with handle:
        for number, line in enumerate(handle, start=1):
            progress(len(line))
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except RecursionError:
                failed(number, "not JSON (nested too deeply)")
                continue
            except ValueError as exc:  # UnicodeDecodeError too
                failed(number, f"not JSON ({exc})")
                continue
            del line  # the line and its parse are dropped before the record goes out: one line in memory
            try:
                record = check_record(raw, number)
            except InvalidArgument as exc:
                failed(number, exc.message)
                continue
            finally:
                del raw
            yield record


def check_record(raw: Any, line: int = 0) -> Record:
    """The record, checked; InvalidArgument naming the first field that is wrong."""
    if not isinstance(raw, dict):
        raise InvalidArgument("record", "must be a JSON object")
    for name in STRING_FIELDS:
        value = raw.get(name)
        if value is not None and not isinstance(value, str):
            raise InvalidArgument(name, f"must be a string, not {_json_type(value)}")
        if isinstance(value, str) and name not in ("text", "original_base64"):  # text: below, for a note
            _utf8(value, name)
    collection = raw.get("collection")
    if collection is not None:
        collection_tags.check_name(collection, field="collection")
    tags = raw.get("tags")
    if tags is None:
        tags = []
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise InvalidArgument("tags", "must be a list of strings")
    for tag in tags:
        _utf8(tag, "tags")
    tags = collection_tags.check_user_tags(tags)
    times = {name: _four_digit_year(raw.get(name)) or None for name in TIME_FIELDS}
    for name, value in times.items():
        if value:
            _timestamp(value, name)
    text, original, doc_type = raw.get("text"), raw.get("original_base64"), raw.get("doc_type")
    if doc_type != "note" and original is None and text:
        doc_type = "note"  # a file exported without its bytes (engine before 3.6) comes back as a note of its text
    data: bytes | None = None
    if doc_type == "note":
        if not text:
            raise InvalidArgument("text", "a note needs its text")
        content = _utf8(text, "text")
    else:
        if not raw.get("filename"):
            raise InvalidArgument("filename", "a file needs its file name")
        try:
            data = base64.b64decode(original or "", validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgument("original_base64", "is not base64") from None
        if not data:
            raise InvalidArgument("original_base64", "a file needs its bytes")
        content = data
    sha256 = hashlib.sha256(content).hexdigest()
    return Record(line=line, collection=collection, tags=tags, title=raw.get("title") or None,
                  source_path=raw.get("source_path") or None, text=text if data is None else None,
                  filename=raw.get("filename") if data is not None else None, data=data, sha256=sha256,
                  key=record_key(raw, sha256), created_at=times["created_at"], updated_at=times["updated_at"],
                  history=tuple({**version, "updated_at": _four_digit_year(version["updated_at"])}
                                for version in check_history(raw.get("history"))) if data is None else ())


def record_key(raw: dict[str, Any], sha256: str) -> str:
    """The record's Idempotency-Key: a digest of its canonical JSON (the base64 of the bytes replaced by
    their digest), so the same record gives the same key on every run and two records never share one."""
    meaning = {name: value for name, value in raw.items() if name != "original_base64"}
    meaning["sha256"] = sha256  # of the content itself, whatever the file claims
    canonical = json.dumps(meaning, sort_keys=True, separators=(",", ":"))  # ASCII: lone surrogates escaped
    return KEY_PREFIX + hashlib.sha256(canonical.encode("ascii")).hexdigest()


def _four_digit_year(value: Any) -> Any:
    """A time with a year of one to three digits padded to four: engines before SQLite schema 10 (PostgreSQL
    schema 8), up to 2026-11-26, answered a year before 1000 as "999-06-01T…", so their exports hold that
    form, which is no ISO-8601 and which those schemas repair in place the same way. Anything else as given
    (the checks that follow judge it)."""
    if not isinstance(value, str):
        return value
    year, dash, rest = value.partition("-")
    if dash and 1 <= len(year) <= 3 and year.isascii() and year.isdigit():
        return year.zfill(4) + dash + rest
    return value


def _timestamp(value: str, name: str) -> None:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(name, f"is not an ISO-8601 timestamp: {value[:40]!r}") from None


def _utf8(value: str, name: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(name, "is not valid Unicode (a lone surrogate)") from None


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "a list" if isinstance(value, list) else "an object"
