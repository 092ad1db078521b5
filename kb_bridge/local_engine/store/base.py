"""The Store: everything the engine keeps, behind one interface.

Routes, the ingestion worker and search never run SQL: they call a Store. Each backend package holds all of
its SQL (`store/sqlite/`, `store/postgres/`); the engine picks one with `store/backends.py:open_store(config)`. Every method is its
own transaction; methods that change a document change its chunks, vectors and tags in that same
transaction, so a reader never sees half of a change and a crash leaves none of it. A method that changes
what search finds returns once search finds it.

Objects cross this interface as the API's JSON dicts (documents, chunks, jobs), so the HTTP layer only
serialises them, plus the few typed values below.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import unicodedata
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import NotANote, PreconditionFailed

if TYPE_CHECKING:
    import numpy as np

Ranking = list[tuple[int, float]]  # (chunk_id, score), best first
JSON = dict[str, object]
# `cancelled` (3.10): a queued job taken back by DELETE /api/v1/jobs/{id} before any worker claimed it.
JOB_STATUSES = ("queued", "running", "done", "failed", "cancelled")
# How many times a job found running at a start (its engine stopped without putting it back: a crash, a
# kill, a lost lease) while it was being worked on is run again: a job only claimed ahead of the model
# (Store.set_working) is not blamed, or the same innocent jobs would be at every restart. A file that ends the
# engine each time it is read (out of memory) would otherwise be resumed at every start, for ever; past this it
# fails with RESUME_LIMIT_ERROR.
MAX_RESUMES = 3
RESUME_LIMIT_ERROR = (f"the engine stopped while running this job {MAX_RESUMES + 1} times (a crash, a kill or a "
                      "lost lease each time); it is not run again, in case it is what stops the engine")
# A job's priority as the API names it. Stored is the job's lane (ingest/scheduling.py: 0 bulk, 1 files,
# 2 prompt), which claims order by; the API shows every lane above bulk as "interactive".
PRIORITIES = ("bulk", "interactive")


@dataclasses.dataclass(frozen=True)
class Passage:
    """A stretch of a chunk's text around the query's words: `text` starts at character `start` of the
    chunk's text and each (start, end) of `highlights` is one matched word in `text` (characters, end
    exclusive)."""

    text: str
    start: int
    highlights: tuple[tuple[int, int], ...]


@dataclasses.dataclass(frozen=True)
class QueryTerms:
    """A query's words as the full-text index holds them, in query order, each once, with their IDF, and
    `ceiling`, the highest BM25 score a chunk could reach for them."""

    weights: tuple[tuple[str, float], ...] = ()
    ceiling: float = 0.0


def text_sha256(text: str) -> str:
    """The key of a chunk's text: with the title, it says whether a stored vector can be reused."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def note_text_key(text: str) -> str:
    """What makes two notes' texts the same (a duplicate, store/note_keys): equal after Unicode NFC,
    trimming and collapsing every run of whitespace into one space."""
    return hashlib.sha256(" ".join(unicodedata.normalize("NFC", text).split()).encode("utf-8")).hexdigest()


@dataclasses.dataclass(frozen=True)
class NoteKey:
    """A note unique in `scope` (a tag it carries) by its normalised text: a second one is a duplicate."""

    scope: str
    text_key: str


def duplicate_answer(conn: Any, sql_jobs: Any, job_id: int | None, doc_id: int | None) -> JSON:
    """The answer to a note that duplicates one already kept: the earlier note's job (the one whose key it
    met) with `duplicate_of`, the earlier note's document id (None while that job runs)."""
    job: JSON = sql_jobs.get_job(conn, job_id) if job_id is not None else {"id": None, "status": "done"}
    found = doc_id if doc_id is not None else job.get("document_id")
    return {**job, "duplicate_of": found}


@dataclasses.dataclass(frozen=True)
class DocumentFilter:
    """Which documents a listing or a search may return; every given criterion must hold.

    Time bounds are timestamps as clock.py writes them (so they compare as text): `*_after` is inclusive
    (>=), `*_before` exclusive (<), on the document's created_at or updated_at (engine 3.8)."""

    tags: tuple[str, ...] = ()
    doc_type: str | None = None
    source_path: str | None = None
    created_after: str | None = None
    created_before: str | None = None
    updated_after: str | None = None
    updated_before: str | None = None

    def is_empty(self) -> bool:
        return not (self.tags or self.doc_type or self.source_path or self.time_bounds())

    def allows(self, document: Mapping[str, object]) -> bool:
        """Whether a document (or a chunk), as the API answers it, meets every criterion, as the stores'
        SQL compares them (times as text)."""
        tags = document.get("tags")
        held = set(tags) if isinstance(tags, list) else set()
        if not held.issuperset(self.tags):
            return False
        if any(value is not None and document.get(name) != value
               for name, value in (("doc_type", self.doc_type), ("source_path", self.source_path))):
            return False
        for column, operator, bound in self.time_bounds():
            stamp = document.get(column)
            if not isinstance(stamp, str) or not (stamp >= bound if operator == ">=" else stamp < bound):
                return False
        return True

    def time_bounds(self) -> list[tuple[str, str, str]]:
        """(column, SQL operator, bound) of each given time bound."""
        bounds = (("created_at", ">=", self.created_after), ("created_at", "<", self.created_before),
                  ("updated_at", ">=", self.updated_after), ("updated_at", "<", self.updated_before))
        return [(column, operator, value) for column, operator, value in bounds if value is not None]


@dataclasses.dataclass(frozen=True)
class NewDocument:
    """A document about to be stored (from a finished ingestion job)."""

    title: str
    doc_type: str
    source_path: str | None
    size_bytes: int
    sha256: str
    content: str
    tags: tuple[str, ...]
    # The times an imported document keeps (POST /jobs `created_at`/`updated_at`, engine 3.8); None: now.
    created_at: str | None = None
    updated_at: str | None = None
    changed_by: str | None = None  # who asked for it, when the client said (3.9)


@dataclasses.dataclass(frozen=True)
class PreparedChunks:
    """A document's chunk texts and their vectors (one row per text), or None without an embedder."""

    texts: list[str]
    vectors: np.ndarray | None


@dataclasses.dataclass(frozen=True)
class ClaimedJob:
    """A queued job this engine has taken to run."""

    id: int
    type: str
    filename: str | None
    payload: Mapping[str, Any]
    staged_path: str | None  # the uploaded file's name in the staging directory (file jobs)
    priority: int = 0
    resumes: int = 0  # engine stops blamed on it so far (MAX_RESUMES): above 0, the worker runs it alone


@dataclasses.dataclass(frozen=True)
class FinishedJob:
    """A job's document, chunked and embedded, ready to store (with the uploaded file, for a file job)."""

    job_id: int
    document: NewDocument
    chunks: PreparedChunks
    original: Original | None = None


@dataclasses.dataclass(frozen=True)
class Original:
    """An uploaded file as it came: kept with its document (GET /documents/{id}/original)."""

    filename: str
    content_type: str
    path: str  # the staged file on this engine's disk


@dataclasses.dataclass(frozen=True)
class Submission:
    """A job to queue: its type, what it needs, and (for a file) the staged upload."""

    type: str
    payload: Mapping[str, Any]
    filename: str | None = None
    staged_path: str | None = None
    priority: int = 0
    unique: NoteKey | None = None  # a note that must not duplicate one already in its scope


@dataclasses.dataclass(frozen=True)
class StoredChunk:
    """A chunk as a store holds it, with its vector (float32 little-endian bytes) if it has one."""

    id: int
    index: int
    title: str
    text: str
    text_sha256: str
    vector: bytes | None


@dataclasses.dataclass(frozen=True)
class StoredVersion:
    """One kept earlier version of a note (3.9), as a store holds it (copying between stores)."""

    version: int
    title: str
    text: str
    tags: tuple[str, ...]
    updated_at: str
    changed_by: str | None


@dataclasses.dataclass(frozen=True)
class StoredDocument:
    """Everything a store holds about one document, ids and versions included (copying between stores)."""

    id: int
    title: str
    doc_type: str
    source_path: str | None
    size_bytes: int
    sha256: str
    version: int
    created_at: str
    updated_at: str
    content: str
    tags: tuple[str, ...]
    chunks: tuple[StoredChunk, ...]
    # (file name, content type, bytes) of an uploaded file as it came, when the store kept it (3.6).
    original: tuple[str | None, str, bytes] | None = None
    # Who made the current text or title, the earlier versions kept, and the duplicate keys (scope, text
    # key) the note holds (3.9; none from an older store).
    changed_by: str | None = None
    versions: tuple[StoredVersion, ...] = ()
    note_keys: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class Idempotency:
    """An Idempotency-Key, the digest of the request it came with, and the oldest time it still counts."""

    key: str
    body_sha256: str
    not_before: str


def check_note(doc_type: object, version: object, doc_id: int, if_match: Collection[str] | None) -> None:
    """A note (else NotANote) at a version `if_match` accepts (else PreconditionFailed); None accepts any."""
    if doc_type != "note":
        raise NotANote(f"document {doc_id} is a {doc_type} file, not a note; only notes can be edited")
    check_version(version, doc_id, if_match)


def check_version(version: object, doc_id: int, if_match: Collection[str] | None) -> None:
    """PreconditionFailed unless `if_match` (the versions accepted; "*" any; None: no condition) holds."""
    if if_match is not None and "*" not in if_match and str(version) not in if_match:
        wanted = ", ".join(sorted(if_match)) or "none"
        raise PreconditionFailed(f"document {doc_id} is at version {version}; If-Match asked for {wanted}")


class Store(Protocol):
    """What the engine needs from its storage."""

    kind: str  # "sqlite" or "postgresql", as /api/v1/status reports it

    # --- life ---------------------------------------------------------------------------------------------
    def open(self) -> int:
        """Create or upgrade the schema (refusing a newer one); returns the schema version."""

    def close(self) -> None: ...

    def recover(self, idempotency_not_before: str, now: str) -> tuple[int, set[str]]:
        """At start: mark done the jobs left running that had stored their document, put the other running
        ones back in the queue, forget old idempotency keys.
        Returns (jobs requeued, staged file names that queued jobs still need)."""

    # --- jobs -----------------------------------------------------------------------------------------------
    def submit(self, submission: Submission, idempotency: Idempotency | None, now: str) -> tuple[JSON, bool]:
        """Queue a job. With an idempotency key already used for the same body, the earlier job and False;
        for another body, Conflict. A note whose `unique` key a note in its scope already holds queues
        nothing: the earlier note's job with `duplicate_of` (its document id, None until stored) and False.
        Checks and insert are one transaction."""

    def get_job(self, job_id: int) -> JSON: ...

    def list_jobs(self, status: str | None, limit: int, offset: int) -> tuple[list[JSON], int]: ...

    def queue_counts(self) -> dict[str, int]: ...

    def claim_job(self, now: str, priorities: Collection[int] | None = None,
                  job_type: str | None = None) -> ClaimedJob | None:
        """Mark the next queued job running and return it (the highest priority first, then the oldest), or
        None when there is none (of the `priorities` and `job_type` asked for; None: any)."""

    def complete_jobs(self, finished: Sequence[FinishedJob], now: str) -> dict[int, int]:
        """Store the jobs' documents in one transaction, and mark the jobs done once search finds them.
        Jobs no longer running are skipped. Returns {job id: document id} of those stored."""

    def fail_job(self, job_id: int, error: str, now: str) -> None: ...

    def set_working(self, job_ids: Collection[int], working: bool) -> None:
        """Mark running jobs as being worked on (prepared, embedded or stored: a stop now is blamed on them) or
        as waiting (claimed ahead of the model: a stop now is not). Claiming a file marks it working (it is read
        and chunked at once), a note not (ingest/worker.py says why); recover() and a takeover count a resume
        only for a job left working (MAX_RESUMES)."""

    def requeue_job(self, job_id: int) -> None: ...

    def cancel_job(self, job_id: int, now: str, running: bool = False) -> tuple[JSON, str | None]:
        """Take back a queued job (status `cancelled`, its payload released): the job, and the staged file it
        no longer needs (None for a note or a job cancelled before). A job already cancelled is answered as
        it is. NotFound; Conflict once a worker has claimed it, unless `running`: this engine's worker has
        dropped the job (its file's read was killed), so a job it runs is cancelled too."""

    # --- documents and tags --------------------------------------------------------------------------------
    def get_document(self, doc_id: int, detail: bool = False) -> JSON:
        """The document (NotFound otherwise); with `detail`, its `content` and `chunks` too."""

    def list_documents(self, where: DocumentFilter, limit: int, offset: int,
                       after: tuple[str, int] | None = None) -> tuple[list[JSON], int]:
        """A page of the documents `where` allows, newest update first (ties: the higher id first), and how many
        it allows in all. `after` (updated_at, id): only those that sort after that key, `offset` counted from it."""

    def delete_document(self, doc_id: int, if_match: Collection[str] | None = None) -> None:
        """Delete a document, with `if_match` (3.15) only at one of those versions (PreconditionFailed)."""

    def writes_held(self) -> contextlib.AbstractContextManager[object]:
        """Hold off this process's other writes to the store for the block (its writes may run in it)."""

    def replace_note(
        self, doc_id: int, title: str, text: str, chunks: PreparedChunks, if_match: Collection[str] | None, now: str,
        changed_by: str | None = None,
    ) -> JSON:
        """Replace a note's title, text, chunks and vectors; version + 1, the version it replaces kept in
        its history (the oldest beyond the store's `keep_versions` dropped). NotANote for a file,
        PreconditionFailed when `if_match` (versions accepted; "*" any) does not hold."""

    def move_document(self, doc_id: int, source_path: str | None, title: str | None,
                      if_match: Collection[str] | None, now: str) -> JSON:
        """Change a document's source_path and/or title in place (None: keep it): same id, chunks and vectors,
        nothing re-embedded (the vectors keep the old title's share of their input); version + 1, a note's
        version it replaces kept in its history as replace_note keeps it. PreconditionFailed when `if_match`
        does not hold."""

    def list_versions(self, doc_id: int) -> list[JSON]:
        """The document's versions, newest (the current one) first: number, title, tags, updated_at,
        changed_by, current. NotFound for a missing document."""

    def get_version(self, doc_id: int, version: int) -> JSON:
        """The document as it was at `version`, with its `content` (no chunks); NotFound when the document
        or that version (never made, or pruned) is not there."""

    def restore_versions(self, doc_id: int, versions: Sequence[Mapping[str, Any]]) -> JSON:
        """Replace a document's earlier versions with these (an import): each a mapping of version, title,
        text, tags, updated_at, changed_by, below the document's version, which rises past them if needed.
        Returns list_versions."""

    def change_tags(self, doc_id: int, add: Sequence[str], remove: Sequence[str], if_match: Collection[str] | None,
                    now: str, missing_is_not_found: bool = False) -> JSON:
        """Remove then add tags in one step (one version step if anything changed, a note's version it
        replaces kept in its history as replace_note keeps it); PreconditionFailed when `if_match` does not
        hold. Removing a tag the document lacks changes nothing, or with
        `missing_is_not_found` is NotFound. Returns the document's id, tags and version."""

    def add_tags(self, doc_id: int, tags: Sequence[str], now: str) -> JSON:
        """change_tags adding `tags`."""

    def remove_tag(self, doc_id: int, tag: str, now: str) -> JSON:
        """change_tags removing `tag`; NotFound when the document lacks it."""

    def patch_tags(self, doc_id: int, add: Sequence[str], remove: Sequence[str], if_match: Collection[str] | None,
                   now: str) -> JSON:
        """change_tags with both lists and `if_match`."""

    def list_tags(self, prefix: str | None, within: str | None = None) -> list[JSON]:
        """[{name, documents}] by name; with `within`, counting only documents that also carry that tag."""
        ...

    def original(self, doc_id: int) -> tuple[str | None, str, Iterator[bytes]]:
        """(file name, content type, the bytes in pieces) of a file document as uploaded; NotFound when
        the document does not exist or has no stored file (a note, or a file stored before 3.6)."""
        ...

    def counts(self) -> dict[str, int]:
        """documents, notes, files, chunks."""

    # --- chunks and vectors ---------------------------------------------------------------------------------
    def get_chunks(self, chunk_ids: Sequence[int]) -> dict[int, JSON]:
        """Chunk objects (score None) by id; ids that no longer exist are absent."""

    def stored_vectors(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], bytes]:
        """Vectors already made for chunks with exactly this (title, text sha256)."""

    def chunks_without_vectors(self, limit: int) -> list[tuple[int, int, str, str]]:
        """(chunk_id, document_id, title, text) of chunks that have no vector yet, oldest first."""

    def chunks_after(self, after: int, limit: int) -> list[tuple[int, int, str, str]]:
        """(chunk_id, document_id, title, text) of up to `limit` chunks with an id above `after`, in id order."""

    def count_chunks_after(self, after: int) -> int: ...

    def read_meta(self, key: str) -> str | None:
        """A value of the store's `meta` table (what the store records about itself), or None."""

    def write_meta(self, key: str, value: str | None) -> None:
        """Set (or, with None, remove) a value of the `meta` table."""

    def add_vectors(self, chunk_ids: Sequence[int], vectors: np.ndarray) -> int:
        """Store vectors for chunks that still exist; returns how many were stored."""

    def use_embeddings(self, identity: str, dim: int) -> int:
        """Serve vector search for embeddings of this identity (model/dimension/input); vectors made by
        another are dropped (and remade by the worker). Returns how many vectors are ready."""

    def vector_count(self) -> int: ...

    def index_status(self) -> JSON:
        """What /api/v1/status reports about the search indexes."""

    # --- search -----------------------------------------------------------------------------------------------
    def search_text(self, query: str, where: DocumentFilter, limit: int, filter_idf: bool = False,
                    terms: QueryTerms | None = None) -> Ranking:
        """BM25 over titles and texts, (chunk_id, score) best first; filters apply before the limit. With
        `filter_idf`, a word's IDF is counted among the chunks the filter allows (store/text_index.py);
        `terms`, this query's `query_terms` with the same filter, saves counting them again."""

    def query_terms(self, query: str, where: DocumentFilter | None = None, filter_idf: bool = False) -> QueryTerms:
        """The query's words as the full-text index holds them with the IDF `search_text` weighs them by given
        the same filter, and the highest BM25 score a chunk could reach for them (hybrid fusion's scale)."""

    def text_tokens(self, chunk_ids: Sequence[int]) -> dict[int, list[str]]:
        """The words of each of these chunks' texts as the full-text index analyses them, in order."""

    def passages(self, query: str, texts: Sequence[str], max_chars: int) -> list[Passage | None]:
        """For each text (a hit's), its stretch of about `max_chars` characters that matches the query best in
        the full-text index's terms, with the matched words; None where no word of the query is in it."""

    def search_vectors(self, vector: np.ndarray, k: int, where: DocumentFilter | None = None,
                       exclude_chunk: int | None = None, exclude_document: int | None = None) -> Ranking:
        """The k chunks most similar to `vector`, (chunk_id, cosine) best first, filters before the cut."""

    def similarities(self, vector: np.ndarray, chunk_ids: Iterable[int]) -> dict[int, float]:
        """The cosine of `vector` with each of these chunks; chunks without a vector are left out."""

    def vector_of(self, chunk_id: int) -> np.ndarray | None: ...

    def collection_notes(self, chunk_ids: Sequence[int]) -> set[int]:
        """Those of these chunks that belong to a note kept in a collection (store/adjacent.py)."""

    def adjacent_notes(self, chunk_ids: Sequence[int], where: DocumentFilter, reach: int = 1) -> dict[int, dict[int, int]]:
        """For each of these chunks of a note in a collection: the chunks of the notes of that collection
        submitted up to `reach` notes before and after it that match `where`, each with its distance (1: just
        before or after; store/adjacent.py)."""
