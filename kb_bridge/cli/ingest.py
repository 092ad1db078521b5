"""`kb-bridge ingest PATH...`: load files and folders into the knowledge base through the engine's API.

Each supported file (KB_UPLOAD_EXTENSIONS) is uploaded as a bulk job with its file name as title and its
path as `source_path`: for a folder, the path below the folder's parent (`kb-bridge ingest ~/handbook`
stores `handbook/intro.md`), for a file given by itself its name. So the same folder gives the same paths
from any working directory, and a rerun recognises what it loaded before:

- a file whose content (sha256) is already stored under its source_path in the collection is skipped;
- a changed file is uploaded again and, once the new version is indexed, the old document is deleted
  (search never finds neither);
- every upload carries an Idempotency-Key made of the source_path and the content's sha256, so a rerun
  after Ctrl-C or a lost connection gets the job already queued instead of a second document.

Hidden files and folders (a name starting with '.') are left out unless named on the command line.
Symbolic links are followed only inside the paths given; the others are skipped and reported in the
summary (ingest_files.py says which and why).
Progress goes to stderr (a bar on a terminal, a line every few seconds otherwise); the summary to stdout.
The exit code is 0 when every file was added, updated or skipped, 1 when any failed, 2 on a usage or
configuration error, 130 after Ctrl-C.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from kb_bridge import collections
from kb_bridge.cli.ingest_files import Candidate, SkippedLink, find_files
from kb_bridge.client.engine import EngineClient
from kb_bridge.errors import EngineAuthFailed, EngineUnavailable, InvalidArgument, KbError
from kb_bridge.uploads.multipart import file_job_body

BLOCK = 1024 * 1024
POLL_SECONDS = 0.5
IDEMPOTENCY_PREFIX = "kb-ingest-"


@dataclasses.dataclass
class Outcome:
    source_path: str
    status: str  # added | updated | skipped | failed
    document_id: int | None = None
    reason: str | None = None


@dataclasses.dataclass
class _Pending:
    candidate: Candidate
    job_id: int
    replaces: list[int]


# --- reading files ------------------------------------------------------------------------------------------


def _open(path: Path) -> BinaryIO:
    # The walk found a regular file at this real path: refuse a link put in its place since (O_NOFOLLOW).
    return os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)), "rb")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with _open(path) as handle:
        while block := handle.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _blocks(path: Path) -> Iterator[bytes]:
    with _open(path) as handle:
        while block := handle.read(BLOCK):
            yield block


# --- progress ------------------------------------------------------------------------------------------------


class Progress:
    """Files and bytes sent, then files indexed: a tqdm bar on a terminal, plain lines otherwise."""

    def __init__(self, stream: TextIO, files: int, total_bytes: int, bar: bool) -> None:
        self._stream = stream
        self._files = files
        self._bytes = total_bytes
        self._bar_enabled = bar
        self._bar: Any = None
        self._phase = ""
        self._done = 0
        self._last_line = 0.0
        self._started = time.monotonic()

    def phase(self, name: str, total: int, unit: str) -> None:
        self.close()
        self._phase, self._done, self._total, self._unit = name, 0, total, unit
        self._started = time.monotonic()
        if self._bar_enabled:
            from tqdm import tqdm

            scale = unit == "B"
            self._bar = tqdm(total=total, desc=name, unit=unit, unit_scale=scale, unit_divisor=1024 if scale else 1000,
                             file=self._stream, dynamic_ncols=True)
        else:
            self._line(force=True)

    def advance(self, amount: int, note: str = "") -> None:
        self._done += amount
        if self._bar is not None:
            self._bar.update(amount)
            if note:
                self._bar.set_postfix_str(note, refresh=False)
        else:
            self._line(note=note)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._phase:
            self._line(force=True)

    def _line(self, note: str = "", force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_line < 5:
            return
        self._last_line = now
        elapsed = max(now - self._started, 1e-6)
        rate = self._done / elapsed
        eta = f", ETA {int((self._total - self._done) / rate)} s" if rate > 0 and self._done < self._total else ""
        byte_unit = self._unit == "B"
        amount = f"{_mib(self._done)}/{_mib(self._total)} MiB" if byte_unit else f"{self._done}/{self._total} {self._unit}"
        speed = f"{_mib(int(rate))} MiB/s" if byte_unit else f"{rate:.1f} {self._unit}/s"
        print(f"{self._phase}: {amount}, {speed}{eta}{'; ' + note if note else ''}", file=self._stream, flush=True)


def _mib(value: int) -> str:
    return f"{value / (1024 * 1024):.1f}"


# --- the run -------------------------------------------------------------------------------------------------


class Ingestion:
    """Upload what changed, wait for the jobs, replace what they update; `outcomes` says what happened."""

    def __init__(self, client: EngineClient, collection: str, tags: Sequence[str], progress: Progress,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._client = client
        self._collection_tag = collections.tag_for(collection)
        self._tags = [self._collection_tag, *collections.check_user_tags(tags, "--tags")]
        self._progress = progress
        self._sleep = sleep
        self.outcomes: list[Outcome] = []
        self._pending: deque[_Pending] = deque()

    def run(self, candidates: Sequence[Candidate]) -> None:
        self._progress.phase("uploading", sum(c.size for c in candidates), "B")
        for index, candidate in enumerate(candidates, 1):
            self._upload(candidate)
            self._progress.advance(0, f"{index}/{len(candidates)} files")
        self._progress.phase("indexing", len(self._pending), "files")
        while self._pending:
            if not self._settle(self._pending[0]):
                self._sleep(POLL_SECONDS)
        self._progress.close()

    def _upload(self, candidate: Candidate) -> None:
        try:
            sha256 = sha256_of(candidate.path)
        except OSError as exc:
            self._record(candidate, "failed", reason=f"cannot read the file: {exc.strerror or exc}")
            self._progress.advance(candidate.size)
            return
        stored = self._stored(candidate.source_path)
        same = [doc for doc in stored if doc.get("sha256") == sha256]
        others = [int(doc["id"]) for doc in stored if doc.get("sha256") != sha256]
        if same:
            # Unchanged; older versions left by an interrupted update go now.
            self._delete(others)
            self._record(candidate, "updated" if others else "skipped", document_id=int(same[0]["id"]))
            self._progress.advance(candidate.size)
            return
        fields = [("title", candidate.path.name), ("source_path", candidate.source_path), ("priority", "bulk"),
                  *(("tags", tag) for tag in self._tags)]
        sent = [0]

        def progress(total_sent: int) -> None:
            self._progress.advance(total_sent - sent[0])
            sent[0] = total_sent

        body = file_job_body(candidate.path.name, candidate.size, lambda: _blocks(candidate.path), fields, progress)
        key = IDEMPOTENCY_PREFIX + hashlib.sha256(f"{candidate.source_path}\n{sha256}".encode()).hexdigest()
        try:
            job = self._client.upload_file_job(body, key)
        except (EngineUnavailable, EngineAuthFailed):
            raise  # nothing else will get through either
        except KbError as exc:
            self._progress.advance(candidate.size - sent[0])
            self._record(candidate, "failed", reason=exc.message)
            return
        self._pending.append(_Pending(candidate, int(job["id"]), others))

    def _settle(self, pending: _Pending) -> bool:
        """Record the job's outcome if it has one; False while it is still queued or running."""
        job = self._client.get_job(pending.job_id)
        if job["status"] not in ("done", "failed"):
            return False
        self._pending.popleft()
        if job["status"] == "failed":
            self._record(pending.candidate, "failed", reason=str(job.get("error") or "the engine could not index it"))
        else:
            self._delete(pending.replaces)
            status = "updated" if pending.replaces else "added"
            self._record(pending.candidate, status, document_id=job.get("document_id"))
        self._progress.advance(1)
        return True

    def _stored(self, source_path: str) -> list[dict[str, Any]]:
        found = self._client.list_documents([("source_path", source_path), ("tag", self._collection_tag),
                                             ("limit", 100)])
        return list(found.get("documents") or [])

    def _delete(self, document_ids: Iterable[int]) -> None:
        for document_id in document_ids:
            try:
                self._client.delete_document(document_id)
            except KbError as exc:
                if getattr(exc, "code", "") != "NOT_FOUND":
                    raise

    def _record(self, candidate: Candidate, status: str, document_id: int | None = None,
                reason: str | None = None) -> None:
        self.outcomes.append(Outcome(candidate.source_path, status, document_id, reason))


# --- the command ---------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="files and folders to load")
    parser.add_argument("--collection", default=collections.DEFAULT, metavar="NAME",
                        help=f"the collection to load into (default: {collections.DEFAULT})")
    parser.add_argument("--tags", default="", metavar="T,...", help="comma-separated tags for every file")
    parser.add_argument("--glob", metavar="PATTERN",
                        help="only files whose path below the folder, or whose name, matches (e.g. '*.md', 'guides/*')")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def summary(outcomes: Sequence[Outcome], ignored: Sequence[str], interrupted: int,
            links: Sequence[SkippedLink] = ()) -> dict[str, Any]:
    counts = {status: sum(1 for o in outcomes if o.status == status) for status in ("added", "updated", "skipped", "failed")}
    return {
        **counts,
        "failures": [{"source_path": o.source_path, "reason": o.reason} for o in outcomes if o.status == "failed"],
        "unsupported": list(ignored),
        "links_skipped": [{"path": link.path, "reason": link.reason} for link in links],
        "interrupted": interrupted,
    }


def print_summary(report: dict[str, Any], stream: TextIO) -> None:
    print(f"added {report['added']}, updated {report['updated']}, skipped {report['skipped']} (unchanged), "
          f"failed {report['failed']}", file=stream)
    for failure in report["failures"]:
        print(f"  failed: {failure['source_path']}: {failure['reason']}", file=stream)
    if report["unsupported"]:
        print(f"  {len(report['unsupported'])} file(s) of unsupported types left out (KB_UPLOAD_EXTENSIONS)",
              file=stream)
    for link in report["links_skipped"]:
        print(f"  skipped link: {link['path']}: {link['reason']}", file=stream)
    if report["interrupted"]:
        print(f"interrupted: {report['interrupted']} file(s) not finished (uploaded ones stay queued in the "
              "engine); run the same command again to continue", file=stream)


def run_ingest(args: argparse.Namespace, client: EngineClient, extensions: Sequence[str],
               stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr) -> int:
    tags = [tag.strip() for tag in args.tags.split(",") if tag.strip()]
    try:
        collections.check_name(args.collection, "--collection")
        collections.check_user_tags(tags, "--tags")
        found = find_files(args.paths, args.glob, extensions)
    except InvalidArgument as exc:
        print(f"kb-bridge ingest: {exc.message}", file=stderr)
        return 2
    candidates, ignored = found.candidates, found.unsupported
    if not candidates:
        print(f"kb-bridge ingest: no supported files found (types: {', '.join(extensions)})", file=stderr)
        for link in found.links:
            print(f"  skipped link: {link.path}: {link.reason}", file=stderr)
        return 1 if ignored or found.links else 2
    progress = Progress(stderr, len(candidates), sum(c.size for c in candidates), bar=stderr.isatty())
    ingestion = Ingestion(client, args.collection, tags, progress)
    code = 0
    try:
        ingestion.run(candidates)
    except KeyboardInterrupt:
        progress.close()
        code = 130
    except (EngineUnavailable, EngineAuthFailed) as exc:
        progress.close()
        print(f"kb-bridge ingest: {exc.message}", file=stderr)
        code = 1
    report = summary(ingestion.outcomes, ignored, len(candidates) - len(ingestion.outcomes), found.links)
    if args.json:
        print(json.dumps(report, indent=2), file=stdout)
    else:
        print_summary(report, stdout)
    if code:
        return code
    return 1 if report["failed"] else 0
