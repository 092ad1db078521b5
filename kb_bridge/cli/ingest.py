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
Progress goes to stderr (progress.py: a bar on a terminal, a line every few seconds otherwise); the summary to
stdout, also after Ctrl-C or a lost engine. The exit code is 0 when every file was added, updated or skipped, 1
when any failed, 2 on a usage or configuration error, 130 after Ctrl-C (exits.py).
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
from kb_bridge.cli.configured import with_settings
from kb_bridge.cli.exits import FAILED, OK, USAGE, add_command
from kb_bridge.cli.ingest_files import Candidate, Found, SkippedLink, find_files
from kb_bridge.cli.progress import Progress
from kb_bridge.client.engine import EngineClient
from kb_bridge.errors import EngineAuthFailed, EngineUnavailable, KbError
from kb_bridge.settings import Settings
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
        with self._progress.phase("uploading", sum(c.size for c in candidates), "B"):
            for index, candidate in enumerate(candidates, 1):
                self._upload(candidate)
                self._progress.advance(0, f"{index}/{len(candidates)} files")
            self._progress.phase("indexing", len(self._pending), "files")
            while self._pending:
                if not self._settle(self._pending[0]):
                    self._sleep(POLL_SECONDS)

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


def add_arguments(commands: Any) -> None:
    parser = add_command(
        commands, "ingest", with_settings(run_ingest),
        help="load files and folders into the knowledge base (skips unchanged files, replaces changed ones)",
        description="Upload every supported file under PATH to the engine (KB_ENGINE_URL, KB_API_KEY) as a bulk "
                    "job, wait until each is indexed, and print what was added, updated, skipped or failed. "
                    "A rerun skips what is already stored and continues an interrupted run. Symbolic links "
                    "are followed only when they point inside the paths given; others are skipped and reported.",
        epilog="Exit status: 0 all files added, updated or skipped; 1 a file failed or the engine was "
               "unreachable; 2 a usage or configuration error; 130 interrupted (Ctrl-C).")
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


def run_ingest(args: argparse.Namespace, settings: Settings) -> int:
    extensions = settings.uploads.extensions
    tags = [tag.strip() for tag in args.tags.split(",") if tag.strip()]
    collections.check_name(args.collection, "--collection")
    collections.check_user_tags(tags, "--tags")
    found = find_files(args.paths, args.glob, extensions)
    if not found.candidates:
        print(f"kb-bridge ingest: no supported files found (types: {', '.join(extensions)})", file=sys.stderr)
        for link in found.links:
            print(f"  skipped link: {link.path}: {link.reason}", file=sys.stderr)
        return FAILED if found.unsupported or found.links else USAGE
    client = EngineClient(settings.engine)
    ingestion = Ingestion(client, args.collection, tags, Progress())
    try:
        ingestion.run(found.candidates)
    finally:  # what was done is reported also when Ctrl-C or a lost engine stopped the run (exits.py says which)
        client.close()
        report = _report(args, ingestion, found)
    return FAILED if report["failed"] else OK


def _report(args: argparse.Namespace, ingestion: Ingestion, found: Found) -> dict[str, Any]:
    report = summary(ingestion.outcomes, found.unsupported, len(found.candidates) - len(ingestion.outcomes),
                     found.links)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_summary(report, sys.stdout)
    return report
