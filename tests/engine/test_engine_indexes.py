"""The derived indexes (store/derived.py): the HNSW vector index and the tantivy text index follow the
database, survive restarts without a rebuild, and come back consistent after a kill -9 or a lost file.

Crashes are real: a child process writes through the store and kills itself with SIGKILL before closing.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from usearch.index import Index

from kb_bridge.local_engine.store import vector_index
from kb_bridge.local_engine.store.base import DocumentFilter, FinishedJob, NewDocument, PreparedChunks, Submission
from kb_bridge.local_engine.store.sqlite import SqliteStore
from kb_bridge.local_engine.store.vector_index import VectorIndex

DIM = 16
MODEL = "test-model/16"


def _unit_rows(rng: np.random.Generator, count: int, dim: int = DIM) -> np.ndarray:
    rows = rng.standard_normal((count, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _exact(matrix: np.ndarray, ids: list[int], query: np.ndarray, k: int) -> list[int]:
    order = np.argsort(-(matrix @ query), kind="stable")[:k]
    return [ids[i] for i in order]


# --- the vector index on its own ------------------------------------------------------------------------------


def test_the_graph_finds_what_exact_search_finds() -> None:
    rng = np.random.default_rng(7)
    vectors = _unit_rows(rng, 3000)
    ids = list(range(1, 3001))
    graph = VectorIndex(DIM, exact_below=0)
    graph.add(ids, vectors, threads=0)
    queries = _unit_rows(rng, 50)
    found = [len(set(_exact(vectors, ids, q, 10)) & {c for c, _ in graph.search(q, 10)}) for q in queries]
    assert sum(found) / (10 * len(queries)) >= 0.95


def test_search_ranks_by_the_exact_cosine_of_the_stored_vectors() -> None:
    """usearch's own cosines are off by ~1e-5 (vector_index.RESCORE): the index re-scores its candidates, so
    graph and exhaustive searches return exactly the cosines `similarities` gives, best first."""
    rng = np.random.default_rng(11)
    vectors = _unit_rows(rng, 3000)
    ids = list(range(1, 3001))
    for exact_below in (0, 10**6):  # the graph, then usearch's exhaustive search
        index = VectorIndex(DIM, exact_below=exact_below)
        index.add(ids, vectors, threads=0)
        for query in _unit_rows(rng, 20):
            ranking = index.search(query, 10)
            assert [score for _, score in ranking] == sorted((score for _, score in ranking), reverse=True)
            cosines = index.similarities(query, [chunk_id for chunk_id, _ in ranking])
            assert [score for _, score in ranking] == pytest.approx([cosines[c] for c, _ in ranking], abs=1e-6)


def test_a_filtered_graph_search_returns_only_allowed_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vector_index, "EXACT_SUBSET", 10)  # force the graph path for the filter
    rng = np.random.default_rng(8)
    vectors = _unit_rows(rng, 2000)
    ids = list(range(1, 2001))
    graph = VectorIndex(DIM, exact_below=0)
    graph.add(ids, vectors, threads=0)
    allowed = ids[::3]
    query = _unit_rows(rng, 1)[0]
    hits = [c for c, _ in graph.search(query, 10, allowed=allowed, excluded={allowed[0]})]
    assert len(hits) == 10 and set(hits) <= set(allowed) - {allowed[0]}
    rows = [i - 1 for i in allowed if i != allowed[0]]
    expected = _exact(vectors[rows], [ids[r] for r in rows], query, 10)
    assert len(set(hits) & set(expected)) >= 8
    # A filter so narrow that the graph's candidates miss it falls back to exact search.
    assert [c for c, _ in graph.search(query, 3, allowed=ids[-12:])] == _exact(vectors[-12:], ids[-12:], query, 3)


def test_a_saved_index_comes_back_only_whole_and_for_the_same_identity(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    index = VectorIndex(DIM)
    index.add(list(range(1, 101)), _unit_rows(rng, 100))
    path = tmp_path / "vectors.usearch"
    identity = {"database": "abc", "model": MODEL}
    index.save(path, {**identity, "position": 42})
    restored = VectorIndex.restore(path, identity, DIM)
    assert restored is not None and len(restored) == 100
    query = _unit_rows(rng, 1)[0]
    assert restored.search(query, 5) == index.search(query, 5)
    assert VectorIndex.restore(path, {**identity, "model": "other/16"}, DIM) is None
    assert VectorIndex.restore(path, {**identity, "database": "xyz"}, DIM) is None
    assert VectorIndex.restore(path, identity, DIM + 1) is None
    with open(path, "r+b") as handle:  # a torn file
        handle.truncate(path.stat().st_size // 2)
    assert VectorIndex.restore(path, identity, DIM) is None


def test_a_graph_saved_with_other_links_is_rebuilt_not_restored(tmp_path: Path) -> None:
    """An engine whose graph parameters changed (16 links before, vector_index.CONNECTIVITY now) builds the
    denser graph once instead of serving the old one."""
    rng = np.random.default_rng(10)
    old = VectorIndex(DIM, Index(ndim=DIM, metric="cos", dtype="f16", connectivity=vector_index.CONNECTIVITY // 2))
    old.add(list(range(1, 51)), _unit_rows(rng, 50))
    path = tmp_path / "vectors.usearch"
    identity = {"database": "abc", "model": MODEL}
    old.save(path, {**identity, "position": 1})
    assert VectorIndex.restore(path, identity, DIM) is None
    current = VectorIndex(DIM)
    current.add(list(range(1, 51)), _unit_rows(rng, 50))
    current.save(path, {**identity, "position": 1})
    restored = VectorIndex.restore(path, identity, DIM)
    assert restored is not None and len(restored) == 50


# --- through the store ------------------------------------------------------------------------------------------


def _store(data: Path) -> SqliteStore:
    store = SqliteStore(data / "engine.sqlite3")
    store.open()
    store.recover("1970-01-01T00:00:00Z", "2026-01-01T00:00:00Z")
    return store


def _add(store: SqliteStore, count: int, seed: int, tags: tuple[str, ...] = ("t",)) -> list[int]:
    rng = np.random.default_rng(seed)
    finished = []
    for i in range(count):
        text = f"note {seed}-{i} about word{seed}x{i}"
        job, _ = store.submit(Submission("note", {"text": text}), None, "2026-01-01T00:00:00Z")
        claimed = store.claim_job("2026-01-01T00:00:00Z")
        assert claimed is not None and claimed.id == job["id"]
        document = NewDocument(f"title {seed}-{i}", "note", None, len(text), "0" * 64, text, tags)
        finished.append(FinishedJob(claimed.id, document, PreparedChunks([text], _unit_rows(rng, 1))))
    stored = store.complete_jobs(finished, "2026-01-01T00:00:00Z")
    return list(stored.values())


def _state(data: Path) -> dict[str, object]:
    """What the database holds, read with plain sqlite3: the truth the indexes must match."""
    import sqlite3

    conn = sqlite3.connect(data / "engine.sqlite3")
    chunks = {row[0] for row in conn.execute("SELECT id FROM chunks")}
    vectors = {row[0] for row in conn.execute("SELECT chunk_id FROM embeddings")}
    tagged = {row[0] for row in conn.execute(
        "SELECT c.id FROM chunks c JOIN document_tags t ON t.document_id = c.document_id WHERE t.tag = 'moved'")}
    conn.close()
    return {"chunks": chunks, "vectors": vectors, "moved": tagged}


def _check_consistent(store: SqliteStore, data: Path) -> None:
    truth = _state(data)
    assert store.indexes.vectors is not None
    assert len(store.indexes.vectors) == len(truth["vectors"])  # type: ignore[arg-type]
    for chunk_id in truth["vectors"]:  # type: ignore[attr-defined]
        assert store.indexes.vectors.vector_of(chunk_id) is not None
    assert store.indexes.text is not None and len(store.indexes.text) == len(truth["chunks"])  # type: ignore[arg-type]
    found = {c for c, _ in store.search_text("note", DocumentFilter(tags=("moved",)), 1000)}
    assert found == truth["moved"]


_CHILD = textwrap.dedent("""
    import os, signal
    from pathlib import Path
    from tests.engine.test_engine_indexes import _add, _store, MODEL, DIM
    store = _store(Path({data!r}))
    store.use_embeddings(MODEL, DIM)
    ids = _add(store, 40, seed=2)
    for doc_id in ids[:10]:
        store.delete_document(doc_id)
    for doc_id in ids[10:20]:
        store.add_tags(doc_id, ["moved"], "2026-01-02T00:00:00Z")
    store.replace_note(ids[20], "changed", "a changed note", __import__("kb_bridge.local_engine.store.base",
        fromlist=["PreparedChunks"]).PreparedChunks(["a changed note"], None), None, "2026-01-02T00:00:00Z")
    print("written", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_after_a_kill_the_indexes_replay_the_log_from_their_saved_position(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    store = _store(data)
    store.use_embeddings(MODEL, DIM)
    _add(store, 30, seed=1)
    store.close()  # a clean stop saves the vector index

    repo = Path(__file__).resolve().parents[2]  # the child imports this module as tests.engine....
    child = subprocess.run([sys.executable, "-c", _CHILD.format(data=str(data))],
                           capture_output=True, text=True, timeout=120, cwd=str(repo))
    assert child.returncode == -9 and "written" in child.stdout, child.stderr

    manifest = json.loads((data / "indexes" / "vectors.usearch.json").read_text())
    store = _store(data)
    assert store.use_embeddings(MODEL, DIM) == len(_state(data)["vectors"])  # type: ignore[arg-type]
    assert store.indexes.vector_source == "restored" and manifest["count"] == 30  # the save from before the kill
    _check_consistent(store, data)
    store.close()


def test_lost_or_foreign_index_files_are_rebuilt_from_the_database(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    store = _store(data)
    store.use_embeddings(MODEL, DIM)
    ids = _add(store, 20, seed=3)
    store.add_tags(ids[0], ["moved"], "2026-01-02T00:00:00Z")
    store.close()

    (data / "indexes" / "vectors.usearch").write_bytes(b"garbage")
    for path in (data / "indexes" / "text").iterdir():
        path.unlink()
    store = _store(data)
    store.use_embeddings(MODEL, DIM)
    assert store.indexes.vector_source == "built"
    _check_consistent(store, data)
    store.close()

    # Another database in the same place (a restored backup): the indexes do not belong to it.
    other = tmp_path / "other"
    other.mkdir()
    donor = _store(other)
    _add(donor, 3, seed=4)
    donor.close()
    _put_database(other / "engine.sqlite3", data)
    store = _store(data)
    store.use_embeddings(MODEL, DIM)
    assert store.indexes.vector_source == "built" and len(store.indexes.text or []) == 3
    _check_consistent(store, data)
    store.close()


def _put_database(database: Path, data: Path) -> None:
    """Put another database file in the data directory's place, as a restore does (its journal files gone)."""
    os.replace(database, data / "engine.sqlite3")
    for leftover in ("engine.sqlite3-wal", "engine.sqlite3-shm"):
        (data / leftover).unlink(missing_ok=True)


def test_the_log_is_pruned_once_both_indexes_have_it_on_disk(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    store = _store(data)
    store.use_embeddings(MODEL, DIM)
    _add(store, 10, seed=5)
    import sqlite3

    def log_rows() -> int:
        conn = sqlite3.connect(data / "engine.sqlite3")
        try:
            return int(conn.execute("SELECT COUNT(*) FROM index_log").fetchone()[0])
        finally:
            conn.close()

    assert log_rows() > 0  # the vector index has not been saved since these changes
    store.close()  # saves it
    store = _store(data)
    store.use_embeddings(MODEL, DIM)
    _add(store, 1, seed=6)  # any write prunes what both indexes hold on disk
    assert log_rows() == 3  # only the new note's entries remain: its chunk, its vector, its tag
    store.close()


def test_a_copy_restored_from_before_later_writes_gets_its_indexes_rebuilt(tmp_path: Path) -> None:
    """A backup made with sqlite3's `.backup` (docs/engine.md) keeps the database's identity, so indexes that
    went on past it look like its own. Restored, its log is behind them: they must be rebuilt, or the
    positions they hold already are skipped (new notes not found) and chunks the copy lacks found."""
    import sqlite3

    data = tmp_path / "data"
    data.mkdir()
    store = _store(data)
    store.use_embeddings(MODEL, DIM)
    _add(store, 3, seed=7)
    source, copy = sqlite3.connect(data / "engine.sqlite3"), sqlite3.connect(tmp_path / "copy.sqlite3")
    source.backup(copy)
    source.close()
    copy.close()
    _add(store, 5, seed=8)  # after the backup: the indexes go past it
    store.close()

    _put_database(tmp_path / "copy.sqlite3", data)
    store = _store(data)
    store.use_embeddings(MODEL, DIM)
    assert store.indexes.vector_source == "built"
    _add(store, 2, seed=9, tags=("moved",))  # written after the restore: found
    _check_consistent(store, data)
    assert not store.search_text("word8x0", DocumentFilter(), 10)  # only in the notes the copy lacks
    assert store.search_text("word9x1", DocumentFilter(), 10)
    store.close()


@pytest.mark.parametrize("alone", [False, True], ids=["in-a-group", "alone"])
def test_a_job_stored_whose_marking_done_failed_is_not_stored_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     alone: bool) -> None:
    """SQLite stores a job's document in one transaction and marks the job done in the next, once search
    finds it. When that second step fails (the database locked past its busy timeout, a full disk), the
    worker writes the jobs of a group again one by one, and fails a job it wrote alone: a job whose document
    is stored must be marked done with it, neither given a second document nor failed (and sent again)."""
    import sqlite3

    from kb_bridge.local_engine.store.sqlite import jobs

    data = tmp_path / "data"
    data.mkdir()
    store = _store(data)
    job, _ = store.submit(Submission("note", {"text": "a note about terns"}), None, "2026-01-01T00:00:00Z")
    claimed = store.claim_job("2026-01-01T00:00:00Z")
    assert claimed is not None
    document = NewDocument("terns", "note", None, 18, "0" * 64, "a note about terns", ())
    finished = [FinishedJob(claimed.id, document, PreparedChunks(["a note about terns"], None))]

    def locked(*args: object) -> None:
        raise sqlite3.OperationalError("database is locked")

    with monkeypatch.context() as patch:
        patch.setattr(jobs, "finish_job", locked)
        with pytest.raises(sqlite3.OperationalError):
            store.complete_jobs(finished, "2026-01-01T00:00:00Z")
    if alone:  # the worker fails a job it could not write alone
        store.fail_job(claimed.id, "internal error while storing the document", "2026-01-01T00:00:00Z")
        stored = {claimed.id: int(str(store.get_job(claimed.id)["document_id"]))}
    else:  # and writes a group that failed again job by job
        stored = store.complete_jobs(finished, "2026-01-01T00:00:00Z")
    conn = sqlite3.connect(data / "engine.sqlite3")
    documents = [row[0] for row in conn.execute("SELECT id FROM documents")]
    conn.close()
    assert len(documents) == 1, f"one job, {len(documents)} documents"
    assert stored == {claimed.id: documents[0]}
    done = store.get_job(int(str(job["id"])))
    assert (done["status"], done["document_id"]) == ("done", documents[0])
    store.close()


@contextlib.contextmanager
def _files_capped_at(size: int) -> Iterator[None]:
    """Files this process writes are capped at `size` bytes for the block (RLIMIT_FSIZE, as a disk with that much
    room left would stop them): a write past it fails with a real EFBIG, since Python ignores SIGXFSZ."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


class _WriterWhoseNextCommitHitsAFileSizeLimit:
    """A real tantivy writer whose next commit meets a real I/O error (EFBIG: files the process writes are
    capped at one byte while it runs, as RLIMIT_FSIZE or a full disk would stop them)."""

    def __init__(self, writer: object) -> None:
        self._writer = writer
        self.failed = False

    def commit(self) -> object:
        if self.failed:
            return self._writer.commit()  # type: ignore[attr-defined]
        self.failed = True
        with _files_capped_at(1):
            return self._writer.commit()  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._writer, name)


def test_changes_a_full_text_index_commit_failed_to_write_are_indexed_once_it_can_write(tmp_path: Path) -> None:
    """A tantivy commit that fails writing a file (a full disk) left its writer broken: later commits said
    they succeeded and added nothing, so the recorded position passed documents the index never got, and a
    restart did not bring them back. The writer is dropped and the changes applied again at the next write."""
    data = tmp_path / "data"
    data.mkdir()
    store = _store(data)
    store.use_embeddings(MODEL, DIM)
    _add(store, 3, seed=1)
    assert store.indexes.text is not None
    failing = _WriterWhoseNextCommitHitsAFileSizeLimit(store.indexes.text._writer)
    store.indexes.text._writer = failing  # type: ignore[assignment]
    with pytest.raises(Exception) as failed:
        _add(store, 3, seed=2)  # stored in the database; the index commit fails
    assert failing.failed
    _add(store, 2, seed=3)  # the next write, with room again
    _check_consistent(store, data)
    assert store.search_text("word2x1", DocumentFilter(), 10)
    store.close()
    store = _store(data)
    store.use_embeddings(MODEL, DIM)
    _check_consistent(store, data)
    assert store.search_text("word2x1", DocumentFilter(), 10)
    store.close()
    assert "the change is stored" in str(failed.value)


class _GraphWhoseSavesHitAFileSizeLimit:
    """A real usearch index whose saves meet a real I/O error part way (files capped at 4 KiB while it
    writes, as RLIMIT_FSIZE or a disk with that much room left would stop them)."""

    def __init__(self, index: Index) -> None:
        self._index = index
        self.saves = 0

    def save(self, path: str) -> None:
        self.saves += 1
        with _files_capped_at(4096):
            self._index.save(path)

    def __getattr__(self, name: str) -> object:
        return getattr(self._index, name)

    def __len__(self) -> int:
        return len(self._index)


def test_a_vector_index_save_that_fails_neither_fails_the_write_nor_leaves_its_partial_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The vector index is saved after the write that reaches `SAVE_EVERY_CHANGES`; a save that failed (a full
    disk) raised out of that write, stored, as a 500, and again at every write until the disk had room, and
    left the index's partial copy holding the space the database needed, across restarts."""
    from kb_bridge.local_engine.store import derived

    data = tmp_path / "data"
    data.mkdir()
    store = _store(data)
    store.use_embeddings(MODEL, DIM)
    _add(store, 30, seed=1)
    assert store.indexes.vectors is not None
    graph = _GraphWhoseSavesHitAFileSizeLimit(store.indexes.vectors._index)
    store.indexes.vectors._index = graph  # type: ignore[assignment]
    monkeypatch.setattr(derived, "SAVE_EVERY_CHANGES", 2)
    _add(store, 3, seed=2)  # the save it triggers fails; the write does not
    _add(store, 3, seed=3)  # nor is it tried again at each write
    assert graph.saves == 1
    assert not list((data / "indexes").glob("*.tmp"))
    _check_consistent(store, data)
    store.indexes.vectors._index = graph._index  # type: ignore[assignment]
    store.close()
    (data / "indexes" / "vectors.usearch.tmp").write_bytes(b"\0" * 4096)  # as a save killed half-way leaves
    store = _store(data)
    assert not (data / "indexes" / "vectors.usearch.tmp").exists()
    store.use_embeddings(MODEL, DIM)
    _check_consistent(store, data)
    store.close()


def test_a_write_stored_and_indexed_is_not_failed_by_the_bookkeeping_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a write is stored and its indexes committed, recording the text index's position and pruning
    the change log can still meet a full disk; either raised out of the write, stored and searchable,
    which a client then reads as failed (the API answers a full disk "nothing of this request was
    stored"). Neither is needed now: the position on disk stays the earlier one, the log unpruned."""
    import errno
    import sqlite3

    from kb_bridge.local_engine.store import derived, text_index

    data = tmp_path / "data"
    data.mkdir()
    store = _store(data)
    store.use_embeddings(MODEL, DIM)
    _add(store, 2, seed=1)
    assert store.indexes.text is not None
    on_disk = store.indexes.text.position

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def database_full(*args: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    with monkeypatch.context() as patch:
        patch.setattr(text_index.json, "dump", full)  # the manifest's temporary file cannot be written
        patch.setattr(derived.DerivedIndexes, "_prune", database_full)
        _add(store, 2, seed=2)
    assert store.indexes.text.position == on_disk  # what the disk says, so nothing is pruned past it
    assert not list((data / "indexes" / "text").glob(".*.tmp"))
    assert store.search_text("word2x1", DocumentFilter(), 10)
    store.close()
    store = _store(data)
    store.use_embeddings(MODEL, DIM)
    _check_consistent(store, data)
    store.close()
