"""Carrying out an ingest plan (ingest_plan.py) against the engine: moves first, then uploads (waiting until
each is indexed), then what they replace and what --prune removes; `outcomes` says what happened and
`entries` what the state file should remember (ingest_state.py).

- every upload carries an Idempotency-Key made of the source_path, the content's SHA-256 and the documents
  it replaces, so a rerun after Ctrl-C or a lost connection gets the job already queued instead of a second
  document, while content that returns to an earlier version (edit A -> B -> A) is a new attempt with a new
  key. The engine answers a key with its job for 24 h: a job that comes back over (cancelled, failed, or its
  document deleted or moved since, as --prune does) belongs to an earlier attempt, and the file is uploaded
  again under a key that names that job (the same chain on every rerun, so a retry still finds its own job).
  The key is tried first as kb-bridges before 2026-11-27 made it and then, if the engine refuses it for
  another body (the same file sent with other tags), naming the tags sent, so that a run an older kb-bridge
  left unfinished is continued across an upgrade, not queued twice;
- a job cancelled while the run waits (the bridge's tasks/cancel, the console) is final: the file is reported
  `cancelled`, and the next run uploads it again;
- a changed file's old document is deleted only once the new version is indexed and found at its
  source_path (search never finds neither);
- a move is one PATCH /documents/{id} (docs/engine-api.md); an engine without it gets the file uploaded
  anew and the old document deleted;
- a file is opened folder by folder from its root (ingest_paths.py: never through a link put in a folder's
  place since the walk), before its upload starts, so that a file that cannot be opened fails alone; one
  that grows, shrinks or cannot be read on while it is sent fails alone too (the plan's CHANGED, or the
  error), and the next run takes it. Raised inside the request, a read error would pass for the engine's
  connection failing and stop the run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, BinaryIO

from kb_bridge import collection_tags
from kb_bridge.cli import ingest_paths
from kb_bridge.cli.ingest_files import Candidate, unreadable
from kb_bridge.cli.ingest_plan import CHANGED, Plan, Step, Stored
from kb_bridge.cli.ingest_state import Known
from kb_bridge.cli.progress import Progress
from kb_bridge.client.engine import EngineClient
from kb_bridge.errors import Conflict, EngineAuthFailed, EngineUnavailable, KbError
from kb_bridge.uploads.multipart import SizeChanged, file_job_body

BLOCK = 1024 * 1024
POLL_SECONDS = 0.1
IDEMPOTENCY_PREFIX = "kb-ingest-"
FINAL = ("done", "failed", "cancelled")  # a job's status never changes after these (docs/engine-api.md)
DONE = {"add": "added", "update": "updated", "move": "moved", "skip": "skipped", "remove": "removed"}


@dataclasses.dataclass
class Outcome:
    source_path: str
    status: str  # added | updated | moved | skipped | removed | failed | cancelled
    document_id: int | None = None
    reason: str | None = None
    moved_from: str | None = None


@dataclasses.dataclass
class _Pending:
    step: Step
    job_id: int


# --- reading files ------------------------------------------------------------------------------------------


class _ReadFailed(Exception):
    """An OSError reading a file while it is sent, raised as something requests does not take for its own."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error.strerror or str(error))
        self.error = error


def sha256_of(candidate: Candidate) -> str:
    digest = hashlib.sha256()
    with ingest_paths.open_file(candidate.root.path, candidate.path) as handle:
        while block := handle.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _blocks(handle: BinaryIO) -> Iterator[bytes]:
    """The file from its first byte (each attempt of an upload reads it again)."""
    try:
        handle.seek(0)
        while block := handle.read(BLOCK):
            yield block
    except OSError as exc:
        raise _ReadFailed(exc) from exc


def _idempotency_key(step: Step, tags: Sequence[str] | None, after: int | None) -> str:
    """The same for every try of one attempt (a rerun after Ctrl-C finds its job), new for a new attempt: the
    documents an attempt replaces are the ones the previous attempt stored, and `after` is the earlier attempt's
    job the engine answered for the key without it. The tags sent (the collection's and the root's among them)
    are part of it when given: the engine refuses a key used again with another body, so one folder loaded into
    two collections, or with other --tags, within the key's 24 hours failed every file. Without them (None) it
    is the key kb-bridges before 2026-11-27 sent, which _upload tries first."""
    parts = [step.source_path, str(step.sha256), *(str(document_id) for document_id in sorted(step.replaces))]
    if tags is not None:
        parts.append("tags " + ",".join(tags))
    if after is not None:
        parts.append(f"after job {after}")
    return IDEMPOTENCY_PREFIX + hashlib.sha256("\n".join(parts).encode()).hexdigest()


# --- the run -------------------------------------------------------------------------------------------------


class Ingestion:
    """Carry out a plan; `outcomes` says what happened, `entries` what the roots' documents now are."""

    def __init__(self, client: EngineClient, collection: str, tags: Sequence[str], progress: Progress,
                 entries: dict[str, Known], on_outcome: Callable[[Outcome], None] = lambda outcome: None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._client = client
        self._collection_tag = collection_tags.tag_for(collection)
        self._tags = [self._collection_tag, *collection_tags.check_user_tags(tags, "--tags")]
        self._progress = progress
        self._sleep = sleep
        self._on_outcome = on_outcome
        self.entries = entries
        self.outcomes: list[Outcome] = []
        self._pending: deque[_Pending] = deque()

    def run(self, plan: Plan) -> None:
        for step in plan.of("fail"):
            self._record(step, "failed", reason=step.reason)
        for step in plan.of("skip"):
            self._skip(step)
        uploads = plan.of("add", "update")
        for step in plan.of("move"):
            if not self._move(step):
                uploads.append(dataclasses.replace(step, replaces=(self._document(step).id,)))
        with self._progress.phase("uploading", sum(s.candidate.size for s in uploads if s.candidate), "B"):
            for index, step in enumerate(uploads, 1):
                self._upload(step)
                self._progress.advance(0, f"{index}/{len(uploads)} files")
            self._progress.phase("indexing", len(self._pending), "files")
            while self._pending:
                if not self._settle(self._pending[0]):
                    self._sleep(POLL_SECONDS)
        for step in plan.of("remove"):
            self._delete([self._document(step).id])
            self.entries.pop(step.source_path, None)
            self._record(step, "removed", document_id=self._document(step).id)

    def _skip(self, step: Step) -> None:
        document = self._document(step)
        self._delete(step.replaces)  # older versions left by an interrupted update go now
        if document.root_tag is None and step.candidate is not None:  # stored by an older kb-bridge: adopted
            self._client.add_tags(document.id, [step.candidate.root.tag])
        self._remember(step, document.id)
        self._record(step, "updated" if step.replaces else "skipped", document_id=document.id)

    def _move(self, step: Step) -> bool:
        """Move the document in place; False when the engine cannot (then the file is uploaded anew)."""
        document, candidate = self._document(step), step.candidate
        assert candidate is not None
        try:
            self._client.move_document(document.id, step.source_path, candidate.path.name, None)
            if document.root_tag is None:
                self._client.add_tags(document.id, [candidate.root.tag])
        except (EngineUnavailable, EngineAuthFailed):
            raise
        except KbError:
            return False  # an engine without PATCH /documents/{id} (404/405), or the document just went
        self.entries.pop(document.source_path, None)
        self._remember(step, document.id)
        self._record(step, "moved", document_id=document.id, moved_from=document.source_path)
        return True

    def _upload(self, step: Step) -> None:
        candidate, sha256 = step.candidate, step.sha256
        assert candidate is not None and sha256 is not None
        tags = (*self._tags, candidate.root.tag)
        fields = [("title", candidate.path.name), ("source_path", candidate.source_path), ("priority", "bulk"),
                  *(("tags", tag) for tag in tags)]
        sent = [0]

        def progress(total_sent: int) -> None:
            self._progress.advance(total_sent - sent[0])
            sent[0] = total_sent

        try:
            handle = ingest_paths.open_file(candidate.root.path, candidate.path)
        except OSError as exc:
            self._fail(step, sent[0], unreadable(exc))
            return
        with handle:
            body = file_job_body(candidate.path.name, candidate.size, lambda: _blocks(handle), fields, progress)
            after: int | None = None
            # First the key without the tags, as kb-bridges before 2026-11-27 sent it: a run one of them left
            # with this file still queued (interrupted, or stopped for an upgrade) gets its job back instead of
            # a second document. The engine refuses that key when it was used with another body (this file sent
            # with other tags, into another collection), and then the key naming the tags is this upload's.
            named: Sequence[str] | None = None
            while True:
                try:
                    job = self._client.upload_file_job(body, _idempotency_key(step, named, after))
                except (EngineUnavailable, EngineAuthFailed):
                    raise  # nothing else will get through either
                except Conflict as exc:
                    if named is not None:
                        self._fail(step, sent[0], exc.message)
                        return
                    named = tags
                    continue
                except KbError as exc:
                    self._fail(step, sent[0], exc.message)
                    return
                except SizeChanged:
                    self._fail(step, sent[0], CHANGED)
                    return
                except _ReadFailed as exc:
                    self._fail(step, sent[0], unreadable(exc.error))
                    return
                if not self._over(step, job):
                    break
                after = int(job["id"])  # an earlier attempt's job, whose document is gone: a new attempt
        self._pending.append(_Pending(step, int(job["id"])))

    def _fail(self, step: Step, sent: int, reason: str) -> None:
        assert step.candidate is not None
        self._progress.advance(step.candidate.size - sent)
        self._record(step, "failed", reason=reason)

    def _over(self, step: Step, job: dict[str, Any]) -> bool:
        """Whether the engine answered an earlier attempt's job that cannot stand for this one: cancelled or
        failed (a new upload is never answered so: each run tries a failed file again, whose cause may have
        passed), or done but its document no longer holds the file where it belongs."""
        if job["status"] in ("cancelled", "failed"):
            return True
        return job["status"] == "done" and not self._holds(step, job.get("document_id"))

    def _holds(self, step: Step, document_id: int | None) -> bool:
        """Whether document `document_id` is (still) in the collection at the step's source_path (a file's
        content never changes in place: a new version is a new document)."""
        if document_id is None:
            return False
        page = self._client.list_documents([("tag", self._collection_tag), ("source_path", step.source_path)])
        return any(int(document["id"]) == int(document_id) for document in page.get("documents") or [])

    def _settle(self, pending: _Pending) -> bool:
        """Record the job's outcome if it has one; False while it is still queued or running."""
        job = self._client.get_job(pending.job_id)
        if job["status"] not in FINAL:
            return False
        self._pending.popleft()
        step = pending.step
        if job["status"] == "failed":
            self._record(step, "failed", reason=str(job.get("error") or "the engine could not index it"))
        elif job["status"] == "cancelled":  # taken back from the queue by someone: nothing to delete or remember
            self._record(step, "cancelled", reason="its job was cancelled; the next run uploads it again")
        elif not self._holds(step, job.get("document_id")):
            # Deleted or moved by someone since it was indexed: what it replaces stays, and a rerun uploads again.
            self._record(step, "failed", reason=f"its document {job.get('document_id')} was deleted or moved before "
                                                "the run could record it; run again")
        else:
            self._delete(step.replaces)
            if step.document is not None:  # a move the engine could not make: the old document goes
                self.entries.pop(step.document.source_path, None)
            self._remember(step, int(job["document_id"]))
            moved_from = step.document.source_path if step.document is not None else None
            self._record(step, DONE[step.action], document_id=job.get("document_id"), moved_from=moved_from)
        self._progress.advance(1)
        return True

    def _delete(self, document_ids: Iterable[int]) -> None:
        for document_id in document_ids:
            try:
                self._client.delete_document(document_id)
            except KbError as exc:
                if getattr(exc, "code", "") != "NOT_FOUND":
                    raise

    @staticmethod
    def _document(step: Step) -> Stored:
        assert step.document is not None
        return step.document

    def _remember(self, step: Step, document_id: int) -> None:
        candidate = step.candidate
        if candidate is not None and step.sha256 is not None:
            self.entries[step.source_path] = Known(candidate.size, candidate.mtime_ns, candidate.inode, step.sha256,
                                                   document_id, candidate.root.tag)

    def _record(self, step: Step, status: str, document_id: int | None = None, reason: str | None = None,
                moved_from: str | None = None) -> None:
        outcome = Outcome(step.source_path, status, document_id, reason, moved_from)
        self.outcomes.append(outcome)
        self._on_outcome(outcome)
