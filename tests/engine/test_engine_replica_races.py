"""Replicas on one PostgreSQL database, through the store, where an interleaving can be forced: two PostgresStores
(two replicas, each with its own data directory and full-text index) on a real PostgreSQL 18
(kb_bridge/testing/postgres.py), and a raw connection where a test must change what only time would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from kb_bridge.local_engine.errors import StoreUnavailable
from kb_bridge.local_engine.ingest.reading import read_job
from kb_bridge.local_engine.store.base import ClaimedJob, DocumentFilter, FinishedJob, NewDocument, PreparedChunks, Submission
from kb_bridge.local_engine.store.postgres import PostgresStore, index_log, jobs, note_keys
from kb_bridge.testing.postgres import PostgresServer

NOW = "2026-01-01T00:00:00.000Z"


@pytest.fixture
def replicas(tmp_path: Path, postgres_server: PostgresServer) -> Iterator[Callable[[str], PostgresStore]]:
    """replica(name) -> an open PostgresStore on one fresh database, with its own data directory."""
    url = postgres_server.new_database()
    opened: list[PostgresStore] = []

    def replica(name: str) -> PostgresStore:
        data = tmp_path / name
        (data / "uploads").mkdir(parents=True)
        store = PostgresStore(url, data, data / "uploads")
        store.open()
        opened.append(store)
        return store

    replica.url = url  # type: ignore[attr-defined]
    yield replica
    for store in opened:
        store.close()


def add_note(store: PostgresStore, text: str) -> int:
    """Queue, claim and store a note on this replica; its document id."""
    job, created = store.submit(Submission("note", {"text": text}), None, NOW)
    assert created
    claimed = store.claim_job(NOW)
    assert claimed is not None and claimed.id == job["id"]
    document = NewDocument(text[:20], "note", None, len(text), "0" * 64, text, ())
    stored = store.complete_jobs([FinishedJob(claimed.id, document, PreparedChunks([text], None))], NOW)
    return stored[claimed.id]


def found(store: PostgresStore, word: str) -> set[int]:
    return {chunk_id for chunk_id, _ in store.search_text(word, DocumentFilter(), 100)}


def test_a_replica_idle_while_another_forgets_old_log_entries_still_finds_what_they_logged(
        replicas: Callable[[str], PostgresStore]) -> None:
    """The log keeps a week: a replica that starts drops older entries. A replica that has run all along
    without a search or a write for that week has not applied them; it must not skip them (it rebuilds)."""
    a, b = replicas("a"), replicas("b")
    add_note(a, "an early note about herons")
    assert found(a, "herons") and found(b, "herons")
    # B writes while A is idle; a week passes; a replica starting (C) forgets entries older than a week.
    add_note(b, "a later note about zebras")
    with psycopg.connect(replicas.url, autocommit=True) as conn:  # type: ignore[attr-defined]
        conn.execute("UPDATE index_log SET logged_at = now() - interval '8 days'")
    c = replicas("c")
    with c.db.snapshot() as conn:
        assert index_log.pruned_through(conn) > a.indexes.position  # entries A never applied are gone
    assert found(c, "zebras")
    assert found(a, "zebras"), "the idle replica's full-text index skipped the entries another replica forgot"
    assert found(a, "herons")


def test_a_job_a_replica_took_back_from_itself_is_stored_once_when_both_runs_finish_together(
        replicas: Callable[[str], PostgresStore]) -> None:
    """A replica that could not renew its lease (the database away for longer than a lease) claims its own
    job again when the database is back: expired leases are claimed first, its own included. Both runs of
    the job can then finish in one window and reach one store transaction: the job must yield one document."""
    a = replicas("a")
    job, _ = a.submit(Submission("note", {"text": "a note about ospreys"}), None, NOW)
    first = a.claim_job(NOW)
    assert first is not None and first.id == job["id"]
    with psycopg.connect(replicas.url, autocommit=True) as conn:  # type: ignore[attr-defined]
        conn.execute("UPDATE jobs SET lease_expires = now() - interval '1 second' WHERE id = %s", (first.id,))
    second = a.claim_job(NOW)
    assert second is not None and second.id == first.id
    document = NewDocument("ospreys", "note", None, 20, "0" * 64, "a note about ospreys", ())
    finished = [FinishedJob(claimed.id, document, PreparedChunks(["a note about ospreys"], None))
                for claimed in (first, second)]
    stored = a.complete_jobs(finished, NOW)
    assert list(stored) == [first.id]
    with psycopg.connect(replicas.url, autocommit=True) as conn:  # type: ignore[attr-defined]
        documents = conn.execute("SELECT id FROM documents").fetchall()
        done = conn.execute("SELECT status, document_id FROM jobs WHERE id = %s", (first.id,)).fetchone()
    assert len(documents) == 1, f"one job, {len(documents)} documents"
    assert done == ("done", documents[0][0])


def test_a_claim_whose_upload_cannot_be_fetched_leaves_the_job_to_be_run_again(
        replicas: Callable[[str], PostgresStore], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A replica takes a file another replica took in, and the database goes away while it fetches the
    bytes: the claim fails, and the job must not stay `running` under a lease this replica renews for ever
    (it ran nowhere until the replica restarted)."""
    a, b = replicas("a"), replicas("b")
    staged = a.uploads_dir / "upload.txt"
    staged.write_text("a file about kingfishers")
    job, _ = a.submit(Submission("file", {"doc_type": "txt", "size": 24, "sha256": "0" * 64}, filename="k.txt",
                                 staged_path="upload.txt"), None, NOW)

    def away(conn: object, job_id: int) -> Iterator[bytes]:
        raise StoreUnavailable("PostgreSQL is unavailable: the test took it away")
        yield b""

    with monkeypatch.context() as patch:
        patch.setattr(jobs, "upload_parts", away)
        with pytest.raises(StoreUnavailable):
            b.claim_job(NOW)
    # Before: `running` under B's lease, which B's lease keeper renewed for ever; no replica took it.
    assert b.get_job(int(str(job["id"])))["status"] == "queued"
    assert not list(b.uploads_dir.iterdir())  # no partial file left
    again = b.claim_job(NOW)
    assert again is not None and again.id == job["id"]
    assert (b.uploads_dir / "upload.txt").read_text() == "a file about kingfishers"


def test_a_file_claimed_the_moment_its_upload_commits_is_still_there_to_read(
        replicas: Callable[[str], PostgresStore], monkeypatch: pytest.MonkeyPatch) -> None:
    """The replica that takes in an upload keeps its bytes in the database and drops its own copy. Its files
    thread, claiming as fast as a flood comes in, can take the job between the commit and that drop: the
    claim finds the copy still there and keeps it, and the drop then takes the file from under the read
    (the job failed: "the uploaded file is missing")."""
    a = replicas("a")
    (a.uploads_dir / "upload.txt").write_text("a file about grebes")
    claimed: list[ClaimedJob | None] = []
    write = a.db.write

    @contextlib.contextmanager
    def write_then_claim() -> Iterator[Any]:
        with write() as conn:
            yield conn
        monkeypatch.setattr(a.db, "write", write)  # the submit's transaction has committed: claim now
        claimed.append(a.claim_job(NOW))

    monkeypatch.setattr(a.db, "write", write_then_claim)
    job, _ = a.submit(Submission("file", {"doc_type": "txt", "size": 19, "sha256": "0" * 64}, filename="g.txt",
                                 staged_path="upload.txt"), None, NOW)
    assert claimed and claimed[0] is not None and claimed[0].id == job["id"]
    document = read_job(claimed[0], a.uploads_dir)
    assert document.content == "a file about grebes"


def test_a_duplicate_key_let_go_while_a_new_note_reads_its_holder_is_taken_by_the_new_note(
        replicas: Callable[[str], PostgresStore]) -> None:
    """A note queued `unique_in` a collection meets the key of an equal note (its INSERT finds the row), and
    before it reads who holds the key, that note is deleted or changed on another replica (the key goes):
    the new note must take the key, not fail with an internal error."""
    a = replicas("a")
    add_note(a, "placeholder")  # a job and document for the key's holder
    key = ("collection:birds", "k" * 64)
    with a.db.write() as conn:
        conn.execute("INSERT INTO note_keys (scope, text_key, job_id, document_id) VALUES (%s, %s, 1, 1)", key)

    class LetGoAfterInsert:
        """The submitting transaction's connection; the holder lets go right after its INSERT."""

        def __init__(self, conn: Any) -> None:
            self.conn = conn

        def execute(self, sql: str, params: Any = None) -> Any:
            cursor = self.conn.execute(sql, params)
            if sql.startswith("INSERT INTO note_keys") and cursor.rowcount == 0:
                with psycopg.connect(replicas.url, autocommit=True) as other:  # type: ignore[attr-defined]
                    other.execute("DELETE FROM note_keys WHERE scope = %s AND text_key = %s", key)
            return cursor

    with a.db.write() as conn:
        assert note_keys.take(LetGoAfterInsert(conn), *key) is None  # free: the new note holds it now
    with a.db.snapshot() as conn:
        assert conn.execute("SELECT job_id, document_id FROM note_keys WHERE scope = %s AND text_key = %s",
                            key).fetchone() == (None, None)


def test_a_replica_that_lost_its_job_cannot_fail_it_once_it_is_back_in_the_queue(
        replicas: Callable[[str], PostgresStore]) -> None:
    """A replica frozen mid-job loses it to another, which puts it back in the queue when it stops. Woken,
    the first replica's run of the job fails (its read timed out while it was frozen): the job is no longer
    its to fail, and stays queued for whichever replica claims it next."""
    a, b = replicas("a"), replicas("b")
    job, _ = a.submit(Submission("note", {"text": "a note about avocets"}), None, NOW)
    assert a.claim_job(NOW) is not None
    with psycopg.connect(replicas.url, autocommit=True) as conn:  # type: ignore[attr-defined]
        conn.execute("UPDATE jobs SET lease_expires = now() - interval '1 second' WHERE id = %s", (job["id"],))
    taken = b.claim_job(NOW)
    assert taken is not None and taken.id == job["id"]
    b.requeue_job(taken.id)  # b stops cleanly
    a.fail_job(taken.id, "the file took longer to read than KB_ENGINE_PARSE_TIMEOUT allows", NOW)
    assert a.get_job(taken.id)["status"] == "queued"
