"""`kb-bridge export FILE.jsonl [--collection NAME]` and `kb-bridge import FILE.jsonl`: a knowledge base
as one JSON object per document, between any two engines that speak docs/engine-api.md.

A record holds what it takes to make the document again: `id`, `collection`, `title`, `tags` (without the
collection tag), `version`, `source_path`, `doc_type`, `created_at`, `updated_at`, `sha256`, `text` (a note's
text; for a file the text the engine extracted, for reading) and, for a file, `filename`, `content_type` and
`original_base64` (its bytes as uploaded; null for a file stored before engine 3.6 kept originals, which
import brings back as a note of its text); with `--history`, a note's `history`, its earlier versions
(cli/history.py), which import gives back to the new document once it is stored (a rerun gives it to a
note an earlier run stored without it, and reports one changed since rather than replace its versions). The
export is written to a temporary file and renamed at the end, so an interrupted export (Ctrl-C, or SIGTERM,
taken as Ctrl-C: exits.py) never leaves a half file under the name, nor the temporary file; FILE `-` is
standard output (and standard input for import). Documents are listed after the last one's key
(cli/listing.py), so that others deleted during the export make it miss none; those updated meanwhile are
listed again at the end.

Import reads the file one line at a time (memory does not grow with the file), queues each record as a
note or an upload, and waits for the jobs. A line that is not JSON or a record that is not valid is reported
by its line number and skipped; the rest import (exit status 1 says not everything did). A record is
already stored, and skipped, when its collection holds a document at the same source_path or, without one,
with the same title and content (import_records.stored_identity); each stored document accounts for one
record, so distinct documents that share a text, a title or even a source_path all come back. Every job
carries an Idempotency-Key derived from its record (import_records.py), so a rerun of the same file, after
Ctrl-C or a failure, gets an earlier run's job back instead of a second document, whatever state that job
is in. Ids and versions are the new engine's own (a document starts again at version 1, or just above the
earlier versions of its history); titles, tags, collections, source paths, contents and original bytes are
kept, and on an engine 3.8 or newer the documents' `created_at` and `updated_at` too (docs/engine-api.md; an
older engine gives the copies new times, and import says so).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import fcntl
import hashlib
import json
import os
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from kb_bridge import collection_tags, shapes
from kb_bridge.cli.configured import with_settings
from kb_bridge.cli import history, listing
from kb_bridge.cli.exits import FAILED, OK, add_command, hint
from kb_bridge.cli.import_records import Record, read_records, stored_identity
from kb_bridge.cli.progress import Progress
from kb_bridge.cli.targets import check_replaceable
from kb_bridge.client.engine import EngineClient
from kb_bridge.client.versions import TIME_FILTERS_VERSION, engine_version, parse_version
from kb_bridge.errors import (EngineAuthFailed, EngineUnavailable, IngestionFailed, InvalidArgument, KbError,
                              NotFound)
from kb_bridge.settings import Settings
from kb_bridge.uploads.multipart import file_job_body

WAIT_SECONDS = 600.0
# A `.NAME.*.part` left this long and locked by no export was left by one that was killed (_remove_abandoned).
ABANDONED_AFTER = timedelta(minutes=1)
# FILE.jsonl naming standard output (export) or standard input (import), as most commands take it.
STANDARD_STREAM = "-"
# Listings of the documents updated while the export ran: each picks up those changed during the one before.
SWEEPS = 3
# How far the engine's clock may lag this one's for the listing of documents updated during the export.
CLOCK_SKEW = timedelta(minutes=5)
# The ids of the documents an engine holds, by identity (import_records.stored_identity).
Stored = dict[tuple[str | None, ...], list[int]]


def add_arguments(commands: Any) -> None:
    export = add_command(commands, "export", with_settings(run_export), sigterm_stops=True,
                         help="write every document (or one collection's) to a JSONL file",
                         description="One JSON object per document, files with their original bytes (base64). "
                                     "Read back with `kb-bridge import`. Ctrl-C or SIGTERM leaves FILE as it was.")
    export.add_argument("file", metavar="FILE.jsonl", type=Path, help="the file to write ('-': standard output)")
    export.add_argument("--collection", help="only this collection")
    export.add_argument("--history", action="store_true",
                        help="with each note's earlier versions (import brings them back)")
    importing = add_command(commands, "import", with_settings(run_import), sigterm_stops=True,
                            help="add the documents of a JSONL export to the knowledge base (idempotent)",
                            description="Queue every record of an export as a note or an upload and wait until "
                                        "each is indexed, keeping its times (engine 3.8+). Records already stored "
                                        "(the same source_path, or for one without, the same title and content, "
                                        "in the same collection) are skipped, and each job's Idempotency-Key "
                                        "comes from its record: a rerun, even after Ctrl-C, never adds a record "
                                        "twice. Invalid lines are reported by number and skipped.",
                            epilog="Exit status: 0 every record added or skipped; 1 a record was invalid or "
                                   "failed (the others were imported), or the engine was unreachable; "
                                   "2 usage error; 130 interrupted by Ctrl-C or SIGTERM (run it again to finish).")
    importing.add_argument("file", metavar="FILE.jsonl", type=Path, help="the export to read ('-': standard input)")
    importing.add_argument("--json", action="store_true", help="print the summary as JSON")


def _client(settings: Settings) -> EngineClient:
    # Originals can be as large as an upload may be: allow answers that size.
    room = settings.uploads.max_bytes + 1024 * 1024
    return EngineClient(dataclasses.replace(settings.engine, max_response_bytes=max(room, settings.engine.max_response_bytes)))


# --- export -------------------------------------------------------------------------------------------


def run_export(args: argparse.Namespace, settings: Settings) -> int:
    tag = collection_tags.tag_for(args.collection) if args.collection else None
    target: Path = args.file
    to_stdout = str(target) == STANDARD_STREAM
    if not to_stdout:
        check_replaceable(target, "FILE.jsonl")
    client = _client(settings)
    try:
        if to_stdout:
            with hint("what reached standard output is not the whole export"):
                written = _write(client, tag, args.history, sys.stdout)
        else:
            written = _write_file(client, tag, args.history, target)
    finally:
        client.close()
    print(f"Exported {written} document(s) to {'standard output' if to_stdout else target}.", file=sys.stderr)
    return OK


def _write_file(client: EngineClient, tag: str | None, with_history: bool, target: Path) -> int:
    """The export written beside `target` and renamed onto it once whole."""
    _remove_abandoned(target)
    temporary: Path | None = None
    try:
        with hint(f"nothing was written to {target}"):
            # The export holds every note: a new file only this user can read (0600, whatever the umask), under a
            # name no one can foresee (mkstemp), so that a link planted beside the target is never written through.
            handle, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
            temporary = Path(name)
            fcntl.flock(handle, fcntl.LOCK_EX)  # held until the file is closed: this export is alive
            with open(handle, "w", encoding="utf-8") as out:
                written = _write(client, tag, with_history, out)
        os.replace(temporary, target)
        return written
    finally:
        if temporary is not None:
            temporary.unlink(missing_ok=True)


def _remove_abandoned(target: Path) -> None:
    """Remove the `.NAME.*.part` files of exports to `target` that were killed (SIGKILL, a crash, a power cut:
    nothing ran to remove them), each a copy of every note: this user's regular files that no export holds
    locked, and older than ABANDONED_AFTER (an export that has just made its file may not have locked it yet)."""
    prefix, now = f".{target.name}.", time.time()
    try:
        names = [name for name in os.listdir(target.parent) if name.startswith(prefix) and name.endswith(".part")]
    except OSError:
        return  # the export itself says why the folder cannot be written
    for name in names:
        path = target.parent / name
        try:
            handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            found = os.fstat(handle)
            if (not stat.S_ISREG(found.st_mode) or found.st_uid != os.getuid()
                    or now - found.st_mtime < ABANDONED_AFTER.total_seconds()):
                continue
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            path.unlink()
        except OSError:
            continue  # locked: an export is writing it
        finally:
            os.close(handle)


def _write(client: EngineClient, tag: str | None, with_history: bool, out: TextIO) -> int:
    written = 0
    for record in _records(client, tag):
        if with_history and record["doc_type"] == "note":
            record["history"] = history.earlier_versions(client, record["id"])
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
        written += 1
    return written


def _records(client: EngineClient, tag: str | None) -> Iterator[dict[str, Any]]:
    """Every document once, newest update first (cli/listing.py: no document is lost to others deleted
    meanwhile), then those updated while the export ran, which moved above where the listing had reached."""
    documents = listing.Listing(client, tag)
    with Progress() as progress:
        since = None
        for sweep in range(1 + SWEEPS):
            found = 0
            for index, (page, total) in enumerate(documents.pages(since)):
                if sweep == 0 and index == 0:
                    progress.phase("export", total, "doc")
                    since = _sweep_from(documents.started)
                for listed in page:
                    found += 1
                    record = _record(client, listed["id"])
                    if record is not None:
                        yield record
                    progress.advance(1)
            if since is None or not documents.by_time or (sweep and not found):
                return


def _sweep_from(newest: str | None) -> str | None:
    """Where the listing of documents updated during the export starts: the latest update when it began
    (a document updated since has a later time), or a little before now should that one lie in the future
    (an imported document keeps its times)."""
    if newest is None:
        return None
    now = datetime.now(timezone.utc) - CLOCK_SKEW
    try:
        started = datetime.fromisoformat(newest.replace("Z", "+00:00"))
        return newest if started <= now else now.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (ValueError, TypeError):  # TypeError: a time without offset, which the engine never writes
        return None


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

# A rerun after an earlier run's job failed (or its document was deleted since) tries again under a key
# derived from that job, so the next rerun finds that try in turn. A record whose job failed in this many
# runs is reported, not tried again, until the engine forgets its keys (24 h).
MAX_TRIES = 8


@dataclasses.dataclass
class ImportReport:
    added: int = 0
    skipped: int = 0
    failed: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def fail(self, line: int, reason: str) -> None:
        self.failed.append({"line": line, "reason": reason})

    def as_dict(self) -> dict[str, Any]:
        return {"added": self.added, "skipped": self.skipped,
                "failed": sorted(self.failed, key=lambda failure: int(failure["line"]))}


def run_import(args: argparse.Namespace, settings: Settings) -> int:
    client = _client(settings)
    report = ImportReport()
    try:
        # read_records closes the handle; a file is opened before anything is asked of the engine or sent.
        handle, size = (sys.stdin.buffer, None) if str(args.file) == STANDARD_STREAM else _open(args.file)
        keeps_times = _keeps_times(client)
        stored = _stored_documents(client)
        pending: dict[int, int] = {}  # job id -> line
        histories: dict[int, tuple[dict[str, Any], ...]] = {}  # job id -> its note's earlier versions
        with hint("what was sent stays queued in the engine: run the same command again to finish (it adds no "
                  "record twice)"), Progress() as progress:
            progress.phase("import", size, "B")
            for record in read_records(handle, report.fail, progress.advance):
                job_id = _send(client, record, stored, pending, report, keeps_times)
                if job_id is not None and record.history:
                    histories[job_id] = record.history
                del record  # its bytes go before the next line is read
            progress.close()
            progress.say(f"kb-bridge import: {len(pending)} record(s) in the engine's queue; waiting until they "
                         "are indexed")
            _wait(client, pending, report, progress, histories)
    finally:
        client.close()
    summary = report.as_dict()
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"Imported {report.added}, skipped {report.skipped} already stored, failed {len(report.failed)}.")
        for failure in summary["failed"]:
            print(f"  line {failure['line']}: {failure['reason']}")
    return FAILED if report.failed else OK


def _open(path: Path) -> tuple[BinaryIO, int]:
    """FILE opened for reading, and its size; a folder, too, cannot be read."""
    try:
        handle = open(path, "rb")
    except OSError as exc:  # a folder is IsADirectoryError
        raise InvalidArgument("FILE", f"cannot read {path}: {exc.strerror}") from None
    return handle, os.fstat(handle.fileno()).st_size


def _keeps_times(client: EngineClient) -> bool:
    """Whether the engine keeps a new document's created_at/updated_at (3.8); says so on stderr if not."""
    version = engine_version(client.status())
    parsed = parse_version(version)
    if parsed is not None and parsed >= TIME_FILTERS_VERSION:
        return True
    print(f"kb-bridge import: the engine (version {version or 'unknown'}) cannot keep documents' times "
          "(3.8 or newer can): the copies get the time they are imported as created_at and updated_at",
          file=sys.stderr)
    return False


def _stored_documents(client: EngineClient) -> Stored:
    """The ids of the documents the engine holds, by identity (import_records.stored_identity)."""
    found: Stored = {}
    for page, _total in listing.Listing(client, None).pages():
        for raw in page:
            if isinstance(raw, dict):
                document = shapes.document(raw)
                sha256 = raw.get("sha256")
                identity = stored_identity(document["collection"], document["source_path"], document["title"],
                                           sha256 if isinstance(sha256, str) else None)
                found.setdefault(identity, []).append(document["id"])
    return found


def _send(client: EngineClient, record: Record, stored: Stored, pending: dict[int, int], report: ImportReport,
          keeps_times: bool) -> int | None:
    """Queue one record, unless a stored document of its identity is not yet accounted for by another; the
    job queued (None when nothing was). A record found stored gets its note's history if it lacks it."""
    held = stored.get(record.identity)
    if held:
        report.skipped += 1
        _complete_history(client, record, held.pop(), report)
        return None
    try:
        job = _submit(client, record, keeps_times)
    except (EngineUnavailable, EngineAuthFailed):
        raise  # nothing else will get through either
    except KbError as exc:
        report.fail(record.line, f"{exc.code}: {exc.message}")
        return None
    if job["status"] == "done":  # stored by an earlier run
        report.skipped += 1
        if job["document_id"] is not None:
            _complete_history(client, record, job["document_id"], report)
        return None
    job_id = int(job["id"])
    if job_id in pending:  # a line repeated word for word
        report.skipped += 1
        return None
    pending[job_id] = record.line
    return job_id


def _complete_history(client: EngineClient, record: Record, document_id: int, report: ImportReport) -> None:
    """Give a note an earlier run stored its record's history, if it lacks it.

    An earlier run restores a history only once the note's job is done (_wait): stopped before (Ctrl-C while
    the job was queued) or refused then, the note is stored without it, and this rerun finds it stored. The
    PUT replaces the note's earlier versions, so it is sent only to a note that has none: one changed since
    (its own earlier versions) is reported rather than losing those."""
    if not record.history:
        return
    wanted = {version.get("version") for version in record.history}
    try:
        listed = client.list_versions(document_id).get("versions")
        kept = {v.get("version") for v in listed or [] if isinstance(v, dict) and not v.get("current")}
        if wanted <= kept:
            return
        if kept:
            report.fail(record.line, f"document {document_id} is stored without this record's history and has "
                                     "changed since: its history was not restored (it would replace the versions "
                                     "kept since)")
            return
        history.restore(client, document_id, record.history)
    except KbError as exc:
        report.fail(record.line, f"its history: {exc.code}: {exc.message}")
        return
    print(f"kb-bridge import: line {record.line}: restored the history of document {document_id}, which an "
          "earlier run stored without it", file=sys.stderr)


def _submit(client: EngineClient, record: Record, keeps_times: bool) -> dict[str, Any]:
    """The record's job (shapes.job): one to wait for, or done when an earlier run already stored the record.

    The record's key makes the engine answer an earlier run's job rather than queue a second one: queued
    or running, it is waited for; done, the record is stored. A job is never finished when the engine first
    answers it, so a finished answer is always an earlier run's. Failed (it made no document), or done but
    its document deleted since, the record is queued again under a key derived from that job.
    """
    key = record.key
    for _ in range(MAX_TRIES):
        job = shapes.job(_post(client, record, key, keeps_times))
        if job["status"] == "failed" or (job["status"] == "done" and _deleted(client, job["document_id"])):
            key = f"{record.key}-after-{job['id']}"
            continue
        return job
    if job["status"] == "done":  # its document deleted again
        raise IngestionFailed(f"stored and deleted again {MAX_TRIES} times; not tried again until the engine forgets "
                              "its keys (24 h)")
    return job  # failed: reported as it ended


def _post(client: EngineClient, record: Record, key: str, keeps_times: bool) -> dict[str, Any]:
    tags = collection_tags.tags_with_collection(record.collection, record.tags)
    named = ["title", "source_path", *(("created_at", "updated_at") if keeps_times and record.created_at else ())]
    if record.data is None:
        body: dict[str, Any] = {"text": record.text, "tags": tags, "priority": "bulk"}
        for field in named:
            if getattr(record, field):
                body[field] = getattr(record, field)
        # The first note of a text in its collection takes the key that makes kb_addnote refuse that text again,
        # as kb_addnote's own note would have (a note sent without unique_in holds none, docs/engine-api.md).
        # Another with the same text is a record of its own and comes back too: an answer that queued nothing
        # keeps no Idempotency-Key, so it is sent again under the same key without the check.
        if record.collection is None:  # in no collection: nothing kb_addnote checks
            return client.create_note_job(body, idempotency_key=key)
        answer = client.create_note_job({**body, "unique_in": collection_tags.tag_for(record.collection)}, key)
        return answer if "duplicate_of" not in answer else client.create_note_job(body, idempotency_key=key)
    data = record.data
    fields = [("tags", json.dumps(tags)), ("priority", "bulk")]
    fields += [(name, getattr(record, name)) for name in named if getattr(record, name)]
    return client.upload_file_job(file_job_body(record.filename or "", len(data), lambda: iter([data]), fields), key)


def _deleted(client: EngineClient, document_id: int | None) -> bool:
    if document_id is None:
        return True
    try:
        client.get_document(document_id)
    except NotFound:
        return True
    return False


def _wait(client: EngineClient, pending: dict[int, int], report: ImportReport, progress: Progress,
          histories: dict[int, tuple[dict[str, Any], ...]]) -> None:
    """Wait for every queued job: each done one is added (with its note's history), each failed one
    reported with its line."""
    deadline = time.monotonic() + WAIT_SECONDS
    delay = 0.05
    with progress.phase("indexing", len(pending), "job"):
        while pending and time.monotonic() < deadline:
            for job_id in list(pending):
                job = shapes.job(client.get_job(job_id))
                if job["status"] == "done":
                    report.added += 1
                    if job_id in histories and job["document_id"] is not None:
                        try:
                            history.restore(client, job["document_id"], histories.pop(job_id))
                        except KbError as exc:
                            report.fail(pending[job_id], f"its history: {exc.code}: {exc.message}")
                elif job["status"] == "failed":
                    report.fail(pending[job_id], f"job {job_id} failed: {job['error']}")
                else:
                    continue
                del pending[job_id]
                progress.advance(1)
            if pending:
                time.sleep(delay)  # polling the engine's queue; bounded by the deadline
                delay = min(delay * 2, 1.0)
    for job_id, line in pending.items():
        report.fail(line, f"job {job_id} was not done within {WAIT_SECONDS:.0f} s; "
                          "run the import again once the engine has caught up")
