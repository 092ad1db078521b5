"""Storage: schema migrations (an old database opens and upgrades), restarts, vectors across restarts."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import flask
import pytest

from kb_bridge.local_engine.store.sqlite import db, documents
from kb_bridge.local_engine.store.sqlite import schema as migrations
from kb_bridge.local_engine.app import engine_of
from kb_bridge.local_engine.errors import ConfigError, DataDirInUse

from kb_bridge.testing.engine_app import API, add_note, wait_for


def _make_v1_database(path: Path) -> None:
    """A database as the pre-3.0 engine left it: schema version 1, no documents.updated_at."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    assert migrations.migrate(conn, target=1) == 1
    columns = [row[1] for row in conn.execute("PRAGMA table_info(documents)")]
    assert "updated_at" not in columns
    conn.execute(
        "INSERT INTO documents (title, doc_type, source_path, size_bytes, sha256, version, created_at) "
        "VALUES ('Old note', 'note', 'old/1', 9, 'x', 4, '2025-01-02T03:04:05.000Z')"
    )
    conn.execute("INSERT INTO document_content (document_id, text) VALUES (1, 'old heron')")
    conn.execute("INSERT INTO document_tags (document_id, tag) VALUES (1, 'collection:memory')")
    conn.execute(
        "INSERT INTO chunks (document_id, chunk_index, title, text, text_sha256) VALUES (1, 0, 'Old note', 'old heron', 'h')"
    )
    conn.close()


def test_version_1_database_upgrades_and_keeps_its_data(make_app: Callable[..., flask.Flask], tmp_path: Path) -> None:
    data_dir = tmp_path / "old"
    _make_v1_database(data_dir / "engine.sqlite3")
    client = make_app(data_dir=data_dir).test_client()
    document = client.get(f"{API}/documents/1").json
    assert document["updated_at"] == document["created_at"] == "2025-01-02T03:04:05.000Z"
    assert document["version"] == 4 and document["tags"] == ["collection:memory"]
    assert client.post(f"{API}/search", json={"query": "heron"}).json["results"][0]["document_id"] == 1
    # The upgraded document takes part in updates like any other.
    updated = client.patch(f"{API}/notes/1", json={"text": "new heron"}).json
    assert updated["version"] == 5 and updated["updated_at"] > updated["created_at"]
    with sqlite3.connect(data_dir / "engine.sqlite3") as conn:
        assert migrations.schema_version(conn) == migrations.LATEST_VERSION


def test_migrating_twice_is_a_no_op(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "db.sqlite3", isolation_level=None)
    assert migrations.migrate(conn) == migrations.LATEST_VERSION
    assert migrations.migrate(conn) == migrations.LATEST_VERSION


def test_a_database_from_a_newer_engine_is_refused(make_app: Callable[..., flask.Flask], tmp_path: Path) -> None:
    data_dir = tmp_path / "newer"
    data_dir.mkdir()
    conn = sqlite3.connect(data_dir / "engine.sqlite3")
    conn.execute(f"PRAGMA user_version = {migrations.LATEST_VERSION + 1}")
    conn.close()
    with pytest.raises(ConfigError, match="newer"):
        make_app(data_dir=data_dir)
    # The failed start released the data directory.
    make_app(data_dir=tmp_path / "other")


def test_one_engine_per_data_directory(make_app: Callable[..., flask.Flask]) -> None:
    make_app()
    with pytest.raises(DataDirInUse):
        make_app()


def test_database_uses_wal(app: flask.Flask) -> None:
    conn = engine_of(app).store.db.connection()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_data_survives_a_restart(make_app: Callable[..., flask.Flask], model: object) -> None:
    first = make_app(model=model)
    note = add_note(first.test_client(), "Persistent egret observations", tags=["keep"])
    engine_of(first).close()
    second = make_app(model=model)
    client = second.test_client()
    assert client.get(f"{API}/documents/{note['id']}").json["tags"] == ["keep"]
    assert engine_of(second).store.vector_count() == 1  # vectors reloaded from SQLite
    hits = client.post(f"{API}/search", json={"query": "egret sightings", "mode": "vector"}).json["results"]
    assert hits[0]["document_id"] == note["id"]


def test_chunks_stored_without_a_model_get_vectors_once_it_is_there(
    make_app: Callable[..., flask.Flask], model: object
) -> None:
    plain = make_app()
    note = add_note(plain.test_client(), "Notes on cormorants drying their wings")
    engine_of(plain).close()
    with_model = make_app(model=model)
    engine = engine_of(with_model)
    wait_for(lambda: engine.store.vector_count() == 1, "backfilled vector")
    hits = with_model.test_client().post(f"{API}/search", json={"query": "seabirds", "mode": "vector"}).json
    assert hits["mode"] == "vector" and hits["results"][0]["document_id"] == note["id"]


def test_stored_vectors_of_another_model_are_replaced(make_app: Callable[..., flask.Flask], model: object) -> None:
    first = make_app(model=model)
    add_note(first.test_client(), "pelicans")
    engine = engine_of(first)
    engine.store.db.connection().execute("UPDATE meta SET value = 'some-other-model/384' WHERE key = 'embedding_model'")
    engine.store.db.connection().execute("UPDATE embeddings SET vector = zeroblob(1536)")
    engine.close()
    second = make_app(model=model)
    engine = engine_of(second)
    wait_for(lambda: engine.store.vector_count() == 1, "re-embedded vector")
    stored = engine.store.db.connection().execute("SELECT vector FROM embeddings").fetchone()[0]
    assert stored != bytes(1536)


class CountingEmbedder:
    """The shared model, recording what it is asked to embed for documents."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.inputs: list[str] = []

    def embed_documents(self, texts: list[str]) -> object:
        self.inputs.extend(texts)
        return self.inner.embed_documents(texts)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_a_stored_vector_is_reused_only_for_the_same_title_and_text(
    make_app: Callable[..., flask.Flask], model: object
) -> None:
    counting = CountingEmbedder(model)
    client = make_app(model=counting).test_client()
    add_note(client, "They dive for fish.", title="Grebes")
    add_note(client, "They dive for fish.", title="Grebes", source_path="copy")
    add_note(client, "They dive for fish.", title="Waterbirds")
    assert counting.inputs == ["Grebes\n\nThey dive for fish.", "Waterbirds\n\nThey dive for fish."]


def test_lists_longer_than_one_statement_binds_are_read_in_parts(tmp_path: Path) -> None:
    """db.in_parts: every id of a list longer than IN_PART is looked up, none twice (store/sqlite/db.py)."""
    conn = sqlite3.connect(tmp_path / "db.sqlite3", isolation_level=None)
    migrations.migrate(conn)
    count = db.IN_PART * 2 + 3
    conn.executemany("INSERT INTO documents (id, title, doc_type, size_bytes, sha256, created_at) "
                     "VALUES (?, 't', 'note', 1, 'x', '2026-01-01T00:00:00.000Z')", [(n,) for n in range(1, count + 1)])
    conn.executemany("INSERT INTO document_tags (document_id, tag) VALUES (?, ?)",
                     [(n, f"n:{n}") for n in range(1, count + 1)])
    parts = list(db.in_parts(list(range(count))))
    assert [len(part) for part, _ in parts] == [db.IN_PART, db.IN_PART, 3]
    assert all(marks.count("?") == len(part) for part, marks in parts)
    tags = documents.tags_of(conn, range(count, 0, -1))
    assert len(tags) == count and all(tags[n] == [f"n:{n}"] for n in range(1, count + 1))
    conn.close()


def test_a_commit_that_fails_leaves_no_transaction_holding_the_write_lock(tmp_path: Path) -> None:
    """A COMMIT can fail and leave its transaction open (a full disk, an I/O error; here a deferred foreign
    key, the one failure a test can force): rolled back, it must not keep the write lock, where every later
    write of the engine waited for it and failed ("database is locked"), its own thread's at once ("cannot
    start a transaction within a transaction"), until a restart."""
    database = db.Database(tmp_path / "engine.sqlite3")
    migrations.migrate(database.connection())
    with pytest.raises(sqlite3.IntegrityError):
        with database.write() as conn:
            conn.execute("PRAGMA defer_foreign_keys = ON")  # the violation is found at COMMIT
            conn.execute("INSERT INTO chunks (document_id, chunk_index, title, text, text_sha256) "
                         "VALUES (999, 0, 't', 'x', 'y')")
    other = sqlite3.connect(tmp_path / "engine.sqlite3", isolation_level=None, timeout=0.5)
    other.execute("BEGIN IMMEDIATE")  # another connection gets the write lock
    other.execute("ROLLBACK")
    other.close()
    with database.write() as conn:  # and so does this thread's
        conn.execute("INSERT INTO meta (key, value) VALUES ('after', 'a failed commit')")
    assert database.connection().execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 0
    database.close()


def test_a_full_disk_is_answered_507_storage_full_and_stores_nothing(app: flask.Flask) -> None:
    """A write the disk had no room for was `500 internal`, "the engine log has the details": a client
    could not tell a full disk (free space, send it again) from a bug. SQLite refuses to grow the database
    here as on a full disk (SQLITE_FULL, by `max_page_count` on the connection the test client's requests
    use)."""
    client = app.test_client()
    first = add_note(client, "A heron by the weir")
    conn = engine_of(app).store.db.connection()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    try:
        answer = client.post(f"{API}/jobs", json={"text": "kingfisher " * 20_000})
        patched = client.patch(f"{API}/notes/{first['id']}", json={"text": "cormorant " * 20_000})
    finally:
        conn.execute("PRAGMA max_page_count = 1073741823")
    for response in (answer, patched):
        assert response.status_code == 507, response.json
        assert response.json["error"]["code"] == "storage_full"
        assert "full" in response.json["error"]["message"]
    assert client.get(f"{API}/jobs?limit=50").json["total"] == 1  # nothing of either stored
    assert client.get(f"{API}/documents/{first['id']}").json["version"] == 1
    assert client.post(f"{API}/jobs", json={"text": "kingfisher"}).status_code == 202  # room again


def test_a_transaction_the_disk_has_no_room_for_is_storage_full_and_the_next_one_is_written(tmp_path: Path) -> None:
    """SQLite rolls a transaction back itself when the database cannot grow (SQLITE_FULL, here by
    `max_page_count` as a full disk would); the ROLLBACK after it failed "cannot rollback - no transaction is
    active", which hid the full disk from the log, the client and the worker."""
    from kb_bridge.local_engine.errors import StorageFull

    database = db.Database(tmp_path / "engine.sqlite3")
    migrations.migrate(database.connection())
    conn = database.connection()
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
    with pytest.raises(StorageFull, match="full"):
        with database.write() as conn:
            conn.execute("INSERT INTO meta (key, value) VALUES ('big', ?)", ("x" * 1_000_000,))
    conn.execute("PRAGMA max_page_count = 1073741823")
    with database.write() as conn:
        conn.execute("INSERT INTO meta (key, value) VALUES ('after', 'room again')")
    assert conn.execute("SELECT COUNT(*) FROM meta WHERE key = 'big'").fetchone()[0] == 0
    database.close()


def test_a_job_the_disk_had_no_room_to_store_is_stored_once_there_is(
        app: flask.Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job's document that met a full disk failed the job for good ("internal error while storing the
    document"), and an upload's file went with it: a note or file acknowledged 202 was lost to a passing
    condition. It is kept and written again, as when PostgreSQL is away."""
    from kb_bridge.local_engine.ingest import worker

    client = app.test_client()
    monkeypatch.setattr(worker, "IDLE_POLL_SECONDS", 0.05)
    real_insert = documents.insert_document
    refused: list[int] = []

    def insert_once_full(*args: object, **kwargs: object) -> object:
        if not refused:
            refused.append(1)
            full = sqlite3.OperationalError("database or disk is full")
            full.sqlite_errorcode = sqlite3.SQLITE_FULL  # type: ignore[attr-defined]  # as SQLite sets it
            raise full
        return real_insert(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(documents, "insert_document", insert_once_full)
    note = add_note(client, "A grebe diving under the pontoon")  # done, not failed
    assert refused
    assert client.get(f"{API}/documents?limit=10").json["total"] == 1
    assert note["title"].startswith("A grebe")


def test_a_job_whose_full_text_index_commit_failed_is_done_only_once_search_finds_it(
        app: flask.Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job stored whose full-text index commit then failed (a full disk) was marked done, as a job stored
    whose marking done failed is, though full-text search did not find it until some later write caught the
    index up; "a job that is done is searchable" (what kb_addnote with `wait` relies on) did not hold. It is
    written again (its document attached, not a second one) until the index takes it."""
    from kb_bridge.local_engine.ingest import worker
    from tests.engine.test_engine_indexes import _WriterWhoseNextCommitHitsAFileSizeLimit

    client = app.test_client()
    monkeypatch.setattr(worker, "IDLE_POLL_SECONDS", 0.05)
    text = engine_of(app).store.indexes.text
    assert text is not None
    failing = _WriterWhoseNextCommitHitsAFileSizeLimit(text._writer)
    text._writer = failing  # type: ignore[assignment]
    note = add_note(client, "A dipper walking under the stream")
    assert failing.failed
    hits = client.post(f"{API}/search", json={"query": "dipper", "mode": "fts"}).json["results"]
    assert [hit["document_id"] for hit in hits] == [note["id"]]
    assert client.get(f"{API}/documents?limit=10").json["total"] == 1
