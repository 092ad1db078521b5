"""`kb-bridge export FILE.jsonl [--collection NAME]` and `kb-bridge import FILE.jsonl`: a knowledge base
as one JSON object per document, between any two engines that speak docs/engine-api.md.

A record holds what it takes to make the document again: `id`, `collection`, `title`, `tags` (without the
collection tag), `version`, `source_path`, `doc_type`, `created_at`, `updated_at`, `sha256`, `text` (a note's
text; for a file the text the engine extracted, for reading) and, for a file, `filename`, `content_type` and
`original_base64` (its bytes as uploaded; null for a file stored before engine 3.6 kept originals, which
import brings back as a note of its text). The export is written to a temporary file and renamed at the end,
so an interrupted export never leaves a half file under the name.

Import queues each record as a note or an upload and waits for the jobs. It is idempotent: a record whose
content (sha256) is already stored in its collection is skipped, so running it twice adds nothing the second
time. Ids and versions are the new engine's own (a document starts again at version 1); titles, tags,
collections, source paths and contents are kept, so the same searches find the same documents.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import dataclasses
import hashlib
import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from kb_bridge import collections, shapes
from kb_bridge.client.engine import EngineClient
from kb_bridge.errors import InvalidArgument, KbError, NotFound
from kb_bridge.settings import Settings
from kb_bridge.uploads.multipart import file_job_body

PAGE = 100
WAIT_SECONDS = 600.0


def add_arguments(commands: Any) -> None:
    export = commands.add_parser("export", help="write every document (or one collection's) to a JSONL file",
                                 description="One JSON object per document, files with their original bytes "
                                             "(base64). Read back with `kb-bridge import`.")
    export.add_argument("file", metavar="FILE.jsonl", type=Path)
    export.add_argument("--collection", help="only this collection")
    importing = commands.add_parser("import", help="add the documents of a JSONL export to the knowledge base (idempotent)",
                                    description="Queue every record of an export as a note or an upload and wait "
                                                "until each is indexed. Records already stored (same content in "
                                                "the same collection) are skipped: a second run adds nothing.",
                                    epilog="Exit status: 0 every record added or skipped; 1 a record failed; 2 usage error.")
    importing.add_argument("file", metavar="FILE.jsonl", type=Path)
    importing.add_argument("--json", action="store_true", help="print the summary as JSON")


def _client(settings: Settings) -> EngineClient:
    # Originals can be as large as an upload may be: allow answers that size.
    room = settings.uploads.max_bytes + 1024 * 1024
    return EngineClient(dataclasses.replace(settings.engine, max_response_bytes=max(room, settings.engine.max_response_bytes)))


def _bar(total: int | None, unit: str, description: str) -> tqdm[Any]:
    return tqdm(total=total, unit=unit, desc=description, file=sys.stderr, disable=None, mininterval=0.5)


# --- export -------------------------------------------------------------------------------------------


def run_export(args: argparse.Namespace, settings: Settings) -> int:
    client = _client(settings)
    target: Path = args.file
    temporary = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        tag = collections.tag_for(args.collection) if args.collection else None
        written = 0
        with open(temporary, "w", encoding="utf-8") as out:
            for record in _records(client, tag):
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                written += 1
        os.replace(temporary, target)
    except InvalidArgument as exc:
        print(f"kb-bridge export: {exc.message}", file=sys.stderr)
        return 2
    except KbError as exc:
        print(f"kb-bridge export: {exc.code}: {exc.message}; nothing was written to {target}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"kb-bridge export: interrupted; nothing was written to {target}", file=sys.stderr)
        return 130
    finally:
        temporary.unlink(missing_ok=True)
        client.close()
    print(f"Exported {written} document(s) to {target}.", file=sys.stderr)
    return 0


def _pages(client: EngineClient, tag: str | None = None) -> Iterator[tuple[list[Any], int | None]]:
    """The engine's documents page by page, newest update first: (page, the total the engine reported)."""
    offset = 0
    while True:
        raw = client.list_documents([("limit", PAGE), ("offset", offset)] + ([("tag", tag)] if tag else []))
        page = shapes.listed(raw, "documents")
        total = raw.get("total")
        yield page, total if isinstance(total, int) else None
        if len(page) < PAGE:
            return
        offset += len(page)


def _records(client: EngineClient, tag: str | None) -> Iterator[dict[str, Any]]:
    """Every document once (newest update first; one that changes during the export is taken once)."""
    seen: set[int] = set()
    bar = None
    try:
        for page, total in _pages(client, tag):
            if bar is None:
                bar = _bar(total, "doc", "export")
            for listed in page:
                document_id = listed.get("id") if isinstance(listed, dict) else None
                if not isinstance(document_id, int) or document_id in seen:
                    continue
                seen.add(document_id)
                record = _record(client, document_id)
                if record is not None:
                    yield record
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()


def _record(client: EngineClient, document_id: int) -> dict[str, Any] | None:
    try:
        raw = client.get_document(document_id)
    except KbError as exc:
        if exc.code == "NOT_FOUND":
            return None  # deleted while the export ran
        raise
    document = shapes.document(raw, full=True)
    record: dict[str, Any] = {key: document[key] for key in (
        "id", "collection", "title", "tags", "version", "source_path", "doc_type", "created_at", "updated_at")}
    record["sha256"] = raw.get("sha256")
    record["text"] = document.get("content") or ""
    if document["doc_type"] != "note":
        record["filename"] = _filename(document)
        try:
            data, content_type = client.get_original(document_id)
        except NotFound:
            # A file stored by an engine that did not keep originals (before 3.6): its text travels instead,
            # and import makes it a note.
            record["content_type"] = None
            record["original_base64"] = None
            return record
        record["content_type"] = content_type
        record["original_base64"] = base64.b64encode(data).decode("ascii")
        record["sha256"] = hashlib.sha256(data).hexdigest()
    return record


def _filename(document: dict[str, Any]) -> str:
    for candidate in (document.get("source_path"), document.get("title")):
        if isinstance(candidate, str) and candidate:
            name = candidate.replace("\\", "/").rsplit("/", 1)[-1]
            if "." in name:
                return name
    return f"document-{document['id']}.{document['doc_type'] or 'txt'}"


# --- import -------------------------------------------------------------------------------------------


@dataclasses.dataclass
class ImportReport:
    added: int = 0
    skipped: int = 0
    failed: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"added": self.added, "skipped": self.skipped, "failed": self.failed}


def run_import(args: argparse.Namespace, settings: Settings) -> int:
    client = _client(settings)
    report = ImportReport()
    try:
        records = list(_read_records(args.file, report))
        stored = _stored_contents(client)
        pending: dict[int, int] = {}  # job id -> line
        with _bar(len(records), "doc", "import") as bar:
            for line, record in records:
                key = (record["sha256"], record["collection"])
                if key in stored:
                    report.skipped += 1
                else:
                    try:
                        pending[_queue(client, record)] = line
                        stored.add(key)  # a file listed twice is added once
                    except KbError as exc:
                        report.failed.append({"line": line, "reason": f"{exc.code}: {exc.message}"})
                bar.update(1)
        _wait(client, pending, report)
    except InvalidArgument as exc:
        print(f"kb-bridge import: {exc.message}", file=sys.stderr)
        return 2
    except KbError as exc:
        print(f"kb-bridge import: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    finally:
        client.close()
    if args.json:
        print(json.dumps(report.as_dict()))
    else:
        print(f"Imported {report.added}, skipped {report.skipped} already stored, failed {len(report.failed)}.")
        for failure in report.failed:
            print(f"  line {failure['line']}: {failure['reason']}")
    return 1 if report.failed else 0


def _read_records(path: Path, report: ImportReport) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        handle = open(path, encoding="utf-8")
    except OSError as exc:
        raise InvalidArgument("FILE", f"cannot read {path}: {exc.strerror}") from None
    with handle:
        for line, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                yield line, _checked(json.loads(text))
            except (ValueError, InvalidArgument) as exc:
                reason = exc.message if isinstance(exc, InvalidArgument) else f"not JSON ({exc})"
                report.failed.append({"line": line, "reason": reason})


def _checked(record: Any) -> dict[str, Any]:
    """A record with the fields import needs, valid; InvalidArgument naming the first that is not."""
    if not isinstance(record, dict):
        raise InvalidArgument("record", "must be a JSON object")
    collection = record.get("collection")
    if collection is not None:
        collections.check_name(collection, field="collection")
    tags = record.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise InvalidArgument("tags", "must be a list of strings")
    collections.check_user_tags(tags)
    for key in ("title", "source_path"):
        if record.get(key) is not None and not isinstance(record[key], str):
            raise InvalidArgument(key, "must be a string")
    if record.get("doc_type") != "note" and record.get("original_base64") is None and record.get("text"):
        record["doc_type"] = "note"  # a file exported without its bytes comes back as a note of its text
    if record.get("doc_type") == "note":
        if not isinstance(record.get("text"), str) or not record["text"]:
            raise InvalidArgument("text", "a note needs its text")
        data = record["text"].encode("utf-8")
    else:
        try:
            data = base64.b64decode(record.get("original_base64") or "", validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgument("original_base64", "is not base64") from None
        if not data:
            raise InvalidArgument("original_base64", "a file needs its bytes")
        if not isinstance(record.get("filename"), str) or not record["filename"]:
            raise InvalidArgument("filename", "a file needs its file name")
        record["_bytes"] = data
    # The content's digest, as the engine keeps it: what says "already stored".
    record["sha256"] = hashlib.sha256(data).hexdigest()
    return record


def _stored_contents(client: EngineClient) -> set[tuple[str, str | None]]:
    """(sha256, collection) of every document the engine holds."""
    return {
        (raw["sha256"], shapes.document(raw)["collection"])
        for page, _total in _pages(client)
        for raw in page
        if isinstance(raw, dict) and isinstance(raw.get("sha256"), str)
    }


def _queue(client: EngineClient, record: dict[str, Any]) -> int:
    tags = collections.tags_with_collection(record.get("collection"), record.get("tags") or [])
    key = str(uuid.uuid4())
    if record.get("doc_type") == "note":
        body: dict[str, Any] = {"text": record["text"], "tags": tags, "priority": "bulk"}
        for field in ("title", "source_path"):
            if record.get(field):
                body[field] = record[field]
        return int(shapes.job(client.create_note_job(body, idempotency_key=key))["id"])
    data: bytes = record["_bytes"]
    fields = [("tags", json.dumps(tags)), ("priority", "bulk")]
    fields += [(name, record[name]) for name in ("title", "source_path") if record.get(name)]
    body_fn = file_job_body(record["filename"], len(data), lambda: iter([data]), fields)
    return int(shapes.job(client.upload_file_job(body_fn, key))["id"])


def _wait(client: EngineClient, pending: dict[int, int], report: ImportReport) -> None:
    """Wait for every queued job: each done one is added, each failed one reported with its line."""
    deadline = time.monotonic() + WAIT_SECONDS
    delay = 0.05
    with _bar(len(pending), "job", "indexing") as bar:
        while pending and time.monotonic() < deadline:
            for job_id in list(pending):
                job = shapes.job(client.get_job(job_id))
                if job["status"] == "done":
                    report.added += 1
                elif job["status"] == "failed":
                    report.failed.append({"line": pending[job_id], "reason": f"job {job_id} failed: {job['error']}"})
                else:
                    continue
                del pending[job_id]
                bar.update(1)
            if pending:
                time.sleep(delay)  # polling the engine's queue; bounded by the deadline
                delay = min(delay * 2, 1.0)
    for job_id, line in pending.items():
        report.failed.append({"line": line, "reason": f"job {job_id} was not done within {WAIT_SECONDS:.0f} s; "
                                                      "run the import again once the engine has caught up"})
