"""The ingestion worker: queued jobs in, stored and searchable documents out, at the speed of the model.

Four threads, each doing one kind of work, so that the model is never idle waiting for the others:

    prepare (notes) ──┐
                      ├─(chunks to embed)──► embed ──(finished jobs)──► store
    files ────────────┘

- **prepare** (`kb-engine-prepare`) and **files** (`kb-engine-files`) claim jobs, prompt ones first (lanes:
  ingest/scheduling.py): prepare claims notes, files claims uploads and reads each in a child process with a
  time and a memory limit (ingest/file_reader.py). Notes need no reading, so they never wait behind a file
  (a pathological one could take up to KB_ENGINE_PARSE_TIMEOUT). Both chunk the text and reuse stored vectors
  of chunks already embedded. Each lane stays at most `_ahead_limit` chunks ahead of the model, except
  prompt work, which is always taken; so a flood in one lane still leaves room to claim the others. A file
  that cannot be read, or is over a limit, fails its job alone; a job cancelled while its file is read
  (`cancel_reading`) has the read killed.
- **embed** (`kb-engine-ingest`) fills a window of `WINDOW_BATCHES` model calls with chunks from as many
  jobs as it takes, the lanes sharing the window (scheduling.window_shares), puts prompt work in the first
  calls and sorts the rest by length (each call pads to its longest text, so neighbours in length waste
  little), and embeds it `batch_size` chunks per call. Between two calls it embeds any prompt work that
  arrived meanwhile, so a note waits for about one call, not for the queue.
- **store** (`kb-engine-store`) writes all the finished jobs waiting for it in one transaction (files and bulk
  work first wait up to `GROUP_WAIT_SECONDS` for more; prompt work never waits); the store marks them done
  once search finds them (store/base.py). A group that fails to write is retried job by job, so one bad job
  fails alone.

A job is marked working in the store (Store.set_working) while it is prepared (a file), in a model window,
or finished and waiting to be stored, and not while it waits for the model: a stop is counted against the
jobs being worked on (MAX_RESUMES), never against those only claimed ahead; a job blamed before is embedded
in a window of its own and stored in a transaction of its own, so that the next stop is blamed on it alone.

Every job a thread holds is in `_in_flight` until it is stored or failed. Stopping takes the threads down
between model calls and puts the jobs they held back in the queue; a crash leaves them `running`, and the
next start requeues them (or marks done those already stored). Nothing already stored is lost either way.
While the model loads, jobs wait, so that documents get their vectors when they are written; once it is
ready and the queue is empty, chunks stored without a vector (by an engine without the model) are embedded.
"""

from __future__ import annotations

import collections
import functools
import logging
import mimetypes
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kb_bridge import control_chars

from ..clock import now_iso
from ..embedding.embedder import Embedder, EmbedderSlot
from ..errors import IndexWriteFailed, IngestionError, StorageFull, StoreUnavailable
from ..store.base import ClaimedJob, FinishedJob, NewDocument, Original, PreparedChunks, Store
from . import scheduling
from .chunking import embedding_input
from .file_reader import FileReader, ReadAborted
from .indexing import Indexer
from .reading import read_job, staged_path
from .staging import Staging

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

IDLE_POLL_SECONDS = 5.0
# 32 calls per window: sorting 512 chunks by length pads less than sorting 128 (bench/ingestion.py,
# docs/benchmarks.md); prompt jobs never wait for a window (they go between two calls).
WINDOW_BATCHES = 32
AHEAD_WINDOWS = 2
# The most jobs and chunks one transaction stores.
GROUP_JOBS = 512
GROUP_CHUNKS = 20_000
# How long finished work waits for more to write with it: fewer commits beside a fast model (also for a flood
# of small files sent without `priority`), never paid by prompt work (docs/benchmarks.md, "Ingestion at the speed of the model").
GROUP_WAIT_SECONDS = 0.5
_TICK = 0.5
# A job's error can quote the file: a part a DOCX names, a parser's words about what it met. One a small file
# made 35 MB long (a DOCX of 34 KB naming a part of that length) went whole into the log, the job's row and every
# listing of jobs (two such jobs took the listing past the bridge's response limit: kb_jobs failed for every
# caller), and its newlines wrote lines of their own into a plain-text log. So it is cut, and its control
# characters are shown as escapes.
MAX_ERROR_CHARS = 1000


@dataclass(eq=False)
class _Work:
    """A claimed job on its way through the threads."""

    job: ClaimedJob
    document: NewDocument | None = None
    texts: list[str] = field(default_factory=list)
    vectors: np.ndarray | None = None
    missing: list[int] = field(default_factory=list)  # rows still to embed
    taken: int = 0  # rows of `missing` handed to the embed thread
    left: int = 0  # rows of `missing` not embedded yet
    counted: bool = False  # `left` is set: progress() may report
    failed: bool = False
    cancelled: bool = False  # cancelled while its file was read: dropped, the job is the canceller's

    @property
    def lane(self) -> int:
        return scheduling.lane_of_priority(self.job.priority)

    @property
    def suspect(self) -> bool:
        """An engine stop was blamed on it before (MAX_RESUMES): it is embedded and stored alone."""
        return self.job.resumes > 0

    def finished(self, staging: Path) -> FinishedJob:
        assert self.document is not None
        path = staged_path(self.job, staging)
        original = None
        if path is not None and self.job.type == "file":
            filename = self.job.filename or path.name
            original = Original(filename, mimetypes.guess_type(filename)[0] or "application/octet-stream", str(path))
        return FinishedJob(self.job.id, self.document, PreparedChunks(self.texts, self.vectors), original)


def _transactions(group: list[_Work]) -> list[list[_Work]]:
    """The transactions to write a gathered group in: one for the jobs not failed meanwhile, and after it one
    for each suspect (blamed for a stop before, as it is embedded in a window of its own): if a suspect stops
    the engine there, it alone is blamed again."""
    ready = [work for work in group if not work.failed]
    return [[work for work in ready if not work.suspect], *([work] for work in ready if work.suspect)]


class _Ahead:
    """Prepared jobs waiting for the model, in one line per lane (ingest/scheduling.py)."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._lines: dict[int, collections.deque[_Work]] = {lane: collections.deque() for lane in scheduling.LANES}
        self._chunks = dict.fromkeys(scheduling.LANES, 0)
        self._closed = False

    @property
    def chunks(self) -> dict[int, int]:
        """Chunks waiting for the model in each lane."""
        with self._condition:
            return dict(self._chunks)

    def put(self, work: _Work) -> None:
        with self._condition:
            self._lines[work.lane].append(work)
            self._chunks[work.lane] += len(work.missing) - work.taken
            self._condition.notify_all()

    def has_prompt(self) -> bool:
        return bool(self._lines[scheduling.PROMPT])

    def take(self, limit: int, timeout: float, prompt_only: bool = False) -> list[tuple[_Work, int]]:
        """Up to `limit` (job, row) pairs to embed, the lanes sharing the window (scheduling.window_shares),
        prompt work first; waits up to `timeout` for some."""
        with self._condition:
            self._condition.wait_for(lambda: self._closed or self.has_prompt() or (
                not prompt_only and any(self._lines.values())), timeout)
            lanes = (scheduling.PROMPT,) if prompt_only else scheduling.LANES
            for lane in lanes:
                if self._lines[lane] and self._lines[lane][0].suspect:
                    # Blamed for a stop before: a window of its own, so that a next stop is blamed on it alone
                    # if it is the cause, and not again on the jobs that happened to share its last window;
                    # never between the calls of another window (prompt_only), whose jobs it would share.
                    return [] if prompt_only else self._take_line(lane, limit, alone=True)
            waiting = {scheduling.PROMPT: self._chunks[scheduling.PROMPT]} if prompt_only else self._chunks
            taken: list[tuple[_Work, int]] = []
            for lane, amount in scheduling.window_shares(waiting, limit).items():
                taken.extend(self._take_line(lane, amount))
            return taken

    def _take_line(self, lane: int, amount: int, alone: bool = False) -> list[tuple[_Work, int]]:
        """Rows from the front of a line; `alone`: of its first job only. A suspect is never taken with
        others: the line stops before it (it goes alone in the next window)."""
        line = self._lines[lane]
        taken: list[tuple[_Work, int]] = []
        while line and len(taken) < amount:
            work = line[0]
            if taken and (alone or work.suspect):
                break
            rows = work.missing[work.taken : work.taken + amount - len(taken)]
            work.taken += len(rows)
            taken.extend((work, row) for row in rows)
            if work.taken == len(work.missing):
                line.popleft()
        self._chunks[lane] -= len(taken)
        return taken

    def close(self) -> None:
        """Wake the embed thread for good: the worker is stopping."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    def drain(self) -> list[_Work]:
        with self._condition:
            works = [work for line in self._lines.values() for work in line]
            for line in self._lines.values():
                line.clear()
            self._chunks = dict.fromkeys(scheduling.LANES, 0)
            return works


class IngestionWorker:
    def __init__(self, store: Store, embedders: EmbedderSlot, indexer: Indexer, staging: Staging,
                 reader: FileReader) -> None:
        self._store = store
        self._embedders = embedders
        self._indexer = indexer
        self._staging = staging
        self._reader = reader
        self._reading: _Work | None = None  # the job whose file the reader is reading
        self._reading_lock = threading.Lock()
        # One per claiming thread: each clears its own before it looks at the queue.
        self._wakes = {"note": threading.Event(), "file": threading.Event()}
        self._stop = threading.Event()
        self._ahead = _Ahead()
        self._finished: queue.Queue[_Work | None] = queue.Queue()  # None: the last item, at stop
        self._in_flight: dict[int, _Work] = {}
        self._in_flight_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._backfill_pending = True

    @property
    def _window(self) -> int:
        return self._indexer.batch_size * WINDOW_BATCHES

    @property
    def _ahead_limit(self) -> int:
        return self._window * AHEAD_WINDOWS

    def chunks_ahead(self) -> int:
        """Chunks prepared and waiting for the model, in all lanes."""
        return sum(self._ahead.chunks.values())

    def start(self) -> None:
        # The store thread last: stop() stops the others first, then lets it write what they finished.
        for name, target in (("kb-engine-prepare", functools.partial(self._prepare_loop, "note")),
                             ("kb-engine-files", functools.partial(self._prepare_loop, "file")),
                             ("kb-engine-ingest", self._embed_loop), ("kb-engine-store", self._store_loop)):
            thread = threading.Thread(target=self._guard(target), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def notify(self) -> None:
        """A job was queued (or the model became ready): look now rather than at the next poll."""
        for wake in self._wakes.values():
            wake.set()

    def cancel_reading(self, job_id: int) -> bool:
        """Kill the read of this job's file, if the reader is reading it; True if so. The job is then the
        caller's to mark cancelled (Intake.cancel): the worker drops it."""
        with self._reading_lock:
            work = self._reading
            if work is None or work.job.id != job_id:
                return False
            work.cancelled = True
            self._reader.abort()
        return True

    def stop(self, timeout: float) -> bool:
        """Stop after the current model call and write; put unfinished jobs back in the queue. True if the
        threads stopped within `timeout`."""
        self._stop.set()
        self.notify()
        self._reader.close()  # a file being read is not waited for: its job goes back to the queue
        self._ahead.close()
        for thread in self._threads[:-1]:  # prepare and embed first: they feed the store thread
            thread.join(timeout / len(self._threads))
        self._finished.put(None)
        if self._threads:
            self._threads[-1].join(timeout / len(self._threads))
        stopped = not any(thread.is_alive() for thread in self._threads)
        if stopped:
            self._requeue_in_flight()
        return stopped

    def _guard(self, loop: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            while not self._stop.is_set():
                try:
                    loop()
                    return
                except Exception:
                    # A database error outside any one job (disk full, locked too long): wait and go on.
                    logger.exception("ingestion step failed; retrying in %.0f s", IDLE_POLL_SECONDS)
                    self._stop.wait(IDLE_POLL_SECONDS)

        return run

    # --- prepare -----------------------------------------------------------------------------------------------

    def _prepare_loop(self, job_type: str) -> None:
        """Claim and prepare jobs of this type (notes, or files) until stopped."""
        wake = self._wakes[job_type]
        while not self._stop.is_set():
            # While the model loads, jobs wait, so that documents get their vectors when they are written.
            if not self._embedders.wait(_TICK):
                continue
            wake.clear()
            lanes = scheduling.lanes_to_claim(self._ahead.chunks, self._ahead_limit)
            full = len(lanes) < len(scheduling.LANES)
            with self._embedders.steady() as settled:
                if not settled:  # a load began after the wait above: the jobs wait for it
                    continue
                job = self._store.claim_job(now_iso(), lanes if full else None, job_type)
            if job is None:
                wake.wait(_TICK if full else IDLE_POLL_SECONDS)
                continue
            self._prepare(job)

    def _prepare(self, job: ClaimedJob) -> None:
        work = _Work(job)
        with self._in_flight_lock:
            self._in_flight[job.id] = work
        logger.info("job %d (%s, %s) started", job.id, job.type, scheduling.LANE_NAMES[work.lane])
        try:
            work.document = self._read(work)
            if work.document is None:
                return
            work.texts = self._indexer.chunk(work.document.content, work.document.doc_type)
            embedder = self._embedders.current()
            if embedder is not None:
                chunks = [(work.document.title, text) for text in work.texts]
                work.vectors, work.missing = self._indexer.reuse(embedder.dim, chunks)
        except IngestionError as exc:
            self._fail(work, exc.message)
            return
        except Exception as exc:
            logger.exception("job %d failed unexpectedly", job.id)
            self._fail(work, f"internal error while ingesting ({type(exc).__name__}); see the engine log")
            return
        # A file is marked working from its claim (its text, of any size, is chunked here), a note not: its
        # text came in one request under KB_ENGINE_MAX_JSON_BYTES and is chunked in pure Python, and a write
        # for every note would cost the claiming thread as much as its claim (docs/engine.md, "Ingestion").
        file = job.type == "file"
        if work.missing and file:
            # Prepared: it waits for the model now, and a stop meanwhile is not its doing. Before put(): the
            # embed thread marks it again when it takes it, and this must not undo that. Before `counted`
            # too: a job that shows progress is no longer blamed for a stop (what the tests wait for).
            self._set_working([work], False)
        elif not work.missing and not file:
            self._set_working([work], True)  # nothing to embed (all reused): straight to the store
        work.left = len(work.missing)
        work.counted = True
        if work.missing:
            self._ahead.put(work)
        else:
            self._finished.put(work)  # still working: the store thread has it next

    def _read(self, work: _Work) -> NewDocument | None:
        """The job's document, its file read by the reader; None when the read was stopped: by a cancel
        (the job is dropped) or by stop() (it stays in flight, to be requeued)."""
        if work.job.type != "file":
            return read_job(work.job, self._staging.directory)
        with self._reading_lock:
            self._reading = work
        document: NewDocument | None = None
        error: IngestionError | None = None
        try:
            document = read_job(work.job, self._staging.directory, self._reader.read)
        except ReadAborted:
            pass
        except IngestionError as exc:
            error = exc
        finally:
            with self._reading_lock:
                self._reading = None
        if work.cancelled:  # also when the read had just ended: cancel_reading answered True
            logger.info("job %d cancelled while its file was read", work.job.id)
            self._release(work)
            return None
        if error is not None:
            raise error
        if document is None and not self._stop.is_set():  # not ours to stop: back to the queue
            self._release(work)
            self._store.requeue_job(work.job.id)
        return document

    # --- embed -------------------------------------------------------------------------------------------------

    def _embed_loop(self) -> None:
        while not self._stop.is_set():
            embedder = self._embedders.current()
            if embedder is None:
                self._stop.wait(_TICK)
                continue
            taken = self._ahead.take(self._window, _TICK)
            self.notify()  # room ahead: the claiming threads may claim more
            if taken:
                self._embed_window(embedder, taken)
            elif not self._backfill(embedder):
                self._ahead.take(0, IDLE_POLL_SECONDS)  # sleep until work arrives

    def _embed_window(self, embedder: Embedder, taken: list[tuple[_Work, int]]) -> None:
        """Embed a window, its jobs marked working while the model has them (a stop now counts against them,
        store/base.py MAX_RESUMES): one write before the window and one after, never one per chunk."""
        marked = {work for work, _ in taken}
        self._set_working(marked, True)
        try:
            self._embed(embedder, taken, marked)
        finally:
            # Jobs with chunks left wait for a later window, no longer to blame; finished ones stay marked
            # until stored (the store thread has them).
            self._set_working([work for work in marked if work.left and not work.failed], False)

    def _embed(self, embedder: Embedder, taken: list[tuple[_Work, int]], marked: set[_Work]) -> None:
        """Embed a window, prompt work first, then shortest texts first, one model call per `batch_size`
        chunks; prompt work arriving meanwhile goes between two calls (its jobs marked working too)."""
        inputs = {(id(work), row): embedding_input(work.document.title, work.texts[row])  # type: ignore[union-attr]
                  for work, row in taken}
        taken.sort(key=lambda pair: scheduling.call_order(pair[0].lane, len(inputs[id(pair[0]), pair[1]])))
        prompt_only = all(work.lane == scheduling.PROMPT for work, _ in taken)
        batch = self._indexer.batch_size
        for start in range(0, len(taken), batch):
            if self._stop.is_set():
                return  # the jobs are requeued by stop()
            if not prompt_only and self._ahead.has_prompt():
                between = self._ahead.take(batch * scheduling.PROMPT_CALLS_BETWEEN, 0, prompt_only=True)
                new = {work for work, _ in between} - marked
                self._set_working(new, True)
                marked |= new
                self._embed(embedder, between, marked)
            part = [(work, row) for work, row in taken[start : start + batch] if not work.failed]
            if not part:
                continue
            try:
                vectors = embedder.embed_documents([inputs[id(work), row] for work, row in part])
            except Exception as exc:
                logger.exception("embedding a batch failed; failing the jobs it held")
                for work in {work for work, _ in part}:
                    self._fail(work, f"internal error while embedding ({type(exc).__name__}); see the engine log")
                continue
            for (work, row), vector in zip(part, vectors, strict=True):
                assert work.vectors is not None
                work.vectors[row] = vector
                work.left -= 1
                if work.left == 0:
                    self._finished.put(work)

    def _backfill(self, embedder: Embedder) -> bool:
        if not self._backfill_pending:
            return False
        try:
            done = self._indexer.backfill(embedder, self._window * 2)
        except Exception:
            logger.exception("embedding stored chunks failed; giving up until the next start")
            done = 0
        if done:
            logger.info("embedded %d stored chunk(s) that had no vector", done)
        else:
            self._backfill_pending = False
        return bool(done)

    # --- store ---------------------------------------------------------------------------------------------------

    def _store_loop(self) -> None:
        while True:
            first = self._finished.get()
            if first is None:
                return
            group, last = self._gather(first)
            for transaction in _transactions(group):
                self._write(transaction)
            if last:
                return

    def _gather(self, first: _Work) -> tuple[list[_Work], bool]:
        """The finished jobs to write in one transaction with `first`, and whether the worker is stopping.

        Prompt work is written at once, with whatever else is finished. Other work waits up to
        GROUP_WAIT_SECONDS for the jobs finishing after it, so that a load (declared bulk or a flood of small
        files) makes a few large transactions (and full-text index commits) rather than one per model call;
        a prompt job arriving meanwhile ends the wait.
        """
        group, chunks = [first], len(first.texts)
        deadline = time.monotonic() + (0.0 if first.lane == scheduling.PROMPT else GROUP_WAIT_SECONDS)
        while len(group) < GROUP_JOBS and chunks < GROUP_CHUNKS:
            wait = deadline - time.monotonic()
            try:
                work = self._finished.get(timeout=wait) if wait > 0 else self._finished.get_nowait()
            except queue.Empty:
                break
            if work is None:
                return group, True
            group.append(work)
            chunks += len(work.texts)
            if work.lane == scheduling.PROMPT:
                deadline = 0.0  # somebody is waiting for this one: write what is finished now
        return group, False

    def _write(self, group: list[_Work]) -> None:
        if not group:
            return
        while True:
            try:
                stored = self._store.complete_jobs([work.finished(self._staging.directory) for work in group], now_iso())
                break
            except (StoreUnavailable, StorageFull, IndexWriteFailed) as exc:
                # The database is away (PostgreSQL restarting) or its disk full: keep the work and write it
                # when it is back or there is room; failed, a job acknowledged with 202 (an upload whose file
                # then goes) would be lost to a passing condition. Stored but not yet in the full-text index,
                # it is written again too (its document attached, not a second one), so that it is done only
                # once searchable. At stop the jobs stay in flight and go back to the queue (or another
                # replica's lease; a job with its document is marked done at the next start).
                logger.warning("%s; keeping %d finished job(s) to write again in %.0f s", exc.message, len(group),
                               IDLE_POLL_SECONDS)
                if self._stop.wait(IDLE_POLL_SECONDS):
                    return
            except Exception:
                if len(group) == 1:
                    logger.exception("job %d could not be stored", group[0].job.id)
                    self._fail(group[0], "internal error while storing the document; see the engine log")
                    return
                logger.exception("storing %d jobs together failed; storing them one by one", len(group))
                for work in group:
                    self._write([work])
                return
        for work in group:
            self._release(work)
            if work.job.id in stored:
                logger.info("job %d done: document %d, %d chunks", work.job.id, stored[work.job.id], len(work.texts))
            # Not stored: another replica took the job over and runs it from its own copy (PostgreSQL keeps the
            # bytes), so this one is no use either; it stayed until this replica restarted.
            self._staging.remove(staged_path(work.job, self._staging.directory))

    # --- bookkeeping ---------------------------------------------------------------------------------------------

    def progress(self, job_id: int) -> tuple[int, int] | None:
        """(chunks embedded, chunks in all) of a job this process is running, once it is chunked; None for a
        job it is not running (queued, finished, or run by another replica)."""
        with self._in_flight_lock:
            work = self._in_flight.get(job_id)
        if work is None or not work.counted or not work.texts:
            return None
        total = len(work.texts)
        return total - work.left, total

    def _set_working(self, works: Iterable[_Work], working: bool) -> None:
        """Store.set_working for these jobs. A failure is logged, not raised: the work goes on, and at worst a
        stop is blamed on a job that was waiting, or not on one worked on (the database was away)."""
        job_ids = {work.job.id for work in works}
        if not job_ids:
            return
        try:
            self._store.set_working(job_ids, working)
        except Exception:
            logger.warning("could not mark job(s) %s %s", sorted(job_ids), "working" if working else "waiting",
                           exc_info=True)

    def _release(self, work: _Work) -> None:
        with self._in_flight_lock:
            self._in_flight.pop(work.job.id, None)

    def _fail(self, work: _Work, message: str) -> None:
        message = job_error(message)
        logger.warning("job %d failed: %s", work.job.id, message)
        work.failed = True
        self._release(work)
        self._store.fail_job(work.job.id, message, now_iso())
        self._staging.remove(staged_path(work.job, self._staging.directory))

    def _requeue_in_flight(self) -> None:
        self._ahead.drain()
        with self._in_flight_lock:
            works, self._in_flight = list(self._in_flight.values()), {}
        for work in works:
            try:
                self._store.requeue_job(work.job.id)
            except Exception:
                logger.exception("could not requeue job %d; it is requeued at the next start", work.job.id)
        if works:
            logger.info("%d unfinished job(s) put back in the queue; they run again at the next start", len(works))


def job_error(message: str) -> str:
    """`message` as a job's error: on one line, its control characters as `\\xNN`, at most MAX_ERROR_CHARS."""
    flat = control_chars.escaped(message)
    return flat if len(flat) <= MAX_ERROR_CHARS else flat[: MAX_ERROR_CHARS - 1] + "\u2026"
