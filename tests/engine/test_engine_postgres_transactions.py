"""The PostgreSQL store's transactions, as the server sees them: a snapshot is read-only repeatable read even
though the level now travels in its BEGIN (set on the pooled connection), the next user of that connection does
not inherit it, and a vector search's HNSW settings last for its own transaction only; a filtered vector search
finds the filter's best chunks however many nearer ones it leaves out. A real PostgreSQL 18
(kb_bridge/testing/postgres.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest

from kb_bridge.local_engine.store.base import DocumentFilter
from kb_bridge.local_engine.store.postgres import schema, vectors
from kb_bridge.local_engine.store.postgres.db import Database
from kb_bridge.testing.postgres import PostgresServer


@pytest.fixture
def url(postgres_server: PostgresServer) -> str:
    """A fresh database."""
    return postgres_server.new_database()


@pytest.fixture
def db(url: str) -> Iterator[Database]:
    """The store's pool on a fresh database, with one connection: every block below reuses it."""
    database = Database(url, max_connections=1)
    yield database
    database.close()


def transaction_mode(conn: Any) -> tuple[str, str]:
    row = conn.execute("SELECT current_setting('transaction_isolation'), current_setting('transaction_read_only')"
                       ).fetchone()
    return str(row[0]), str(row[1])


def hnsw_settings(conn: Any) -> tuple[str, str]:
    row = conn.execute("SELECT current_setting('hnsw.ef_search'), current_setting('hnsw.iterative_scan')").fetchone()
    return str(row[0]), str(row[1])


def test_a_snapshot_is_read_only_repeatable_read_and_its_connection_goes_back_plain(db: Database) -> None:
    with db.snapshot() as conn:
        assert transaction_mode(conn) == ("repeatable read", "on")
        used = conn
    with db.connection() as conn, conn.transaction():
        assert conn is used
        assert transaction_mode(conn) == ("read committed", "off")
        conn.execute("CREATE TABLE written (n int)")  # a read-only leftover would refuse this
    with db.snapshot() as conn:
        assert conn is used and transaction_mode(conn) == ("repeatable read", "on")


def test_a_vector_search_sets_hnsw_for_its_own_transaction_only(db: Database) -> None:
    with db.connection() as conn:
        schema.migrate(conn)
    with db.write() as conn:
        schema.vector_table(conn, 3)
    with db.snapshot() as conn:
        assert vectors.nearest(conn, np.array([1.0, 0.0, 0.0], dtype=np.float32), 5, DocumentFilter(), None,
                               None, 123) == []
        assert hnsw_settings(conn) == ("123", "relaxed_order")
    with db.snapshot() as conn:
        assert hnsw_settings(conn) == ("40", "off")  # pgvector's defaults


# PostgreSQL's own error for a file it could not extend (SQLSTATE 53100), raised on demand.
NO_ROOM = "RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'"


def test_a_full_disk_is_storage_full_and_the_connection_serves_on(db: Database) -> None:
    """A full disk on PostgreSQL was "PostgreSQL is unavailable" (503): a client retried at once, and was not
    told that nothing was stored nor why. It is StorageFull, as SQLite's (507, store/sqlite/db.py)."""
    from kb_bridge.local_engine.errors import StorageFull

    with pytest.raises(StorageFull, match="No space left"):
        with db.connection() as conn:
            conn.execute(f"DO $$ BEGIN {NO_ROOM}; END $$")
    with db.connection() as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.parametrize("store", ["postgresql"], indirect=True)
def test_a_write_postgresql_has_no_room_for_is_507_and_stores_nothing(make_app: Any) -> None:
    """Through the engine API: a note whose job PostgreSQL cannot store (its disk full, here a trigger raising
    disk_full) is `507 storage_full`, nothing of it kept, and the next one is stored once there is room."""
    from kb_bridge.local_engine.app import engine_of
    from kb_bridge.testing.engine_app import API

    app = make_app()
    client = app.test_client()
    with engine_of(app).store.db.connection() as conn:  # type: ignore[attr-defined]
        conn.execute(f"CREATE FUNCTION no_room() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {NO_ROOM}; END $$")
        conn.execute("CREATE TRIGGER no_room BEFORE INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION no_room()")
    refused = client.post(f"{API}/jobs", json={"text": "A heron by the weir"})
    assert refused.status_code == 507, refused.json
    assert refused.json["error"]["code"] == "storage_full" and "No space left" in refused.json["error"]["message"]
    assert client.get(f"{API}/jobs").json["total"] == 0
    with engine_of(app).store.db.connection() as conn:  # type: ignore[attr-defined]
        conn.execute("DROP TRIGGER no_room ON jobs")
    assert client.post(f"{API}/jobs", json={"text": "A heron by the weir"}).status_code == 202


def test_a_filtered_vector_search_finds_the_filters_best_chunks_behind_more_nearer_ones_than_hnsw_scans(
        db: Database, url: str) -> None:
    """21,000 chunks of collection:a crowd the query; collection:b's best (cosine 0.5) lies behind them all, its
    2,000 others far off. HNSW's iterative scan gave up after 20,000 tuples: 0 to 2 arbitrary hits of collection:b
    where 5 were asked for."""
    dim, near, far = 16, 21_000, 2_000
    with db.connection() as conn:
        schema.migrate(conn)
    with db.write() as conn:
        schema.vector_table(conn, dim)
    rng = np.random.default_rng(3)
    query = rng.standard_normal(dim).astype(np.float32)
    query /= np.linalg.norm(query)
    side = rng.standard_normal(dim).astype(np.float32)
    side -= (side @ query) * query
    rows = [(1, "collection:b", 0.5 * query + np.sqrt(0.75) * side / np.linalg.norm(side))]
    for n in range(near + far):
        crowd = n < near
        v = (query if crowd else -query) + (0.1 if crowd else 0.3) * rng.standard_normal(dim).astype(np.float32)
        rows.append((n + 2, "collection:a" if crowd else "collection:b", v / np.linalg.norm(v)))
    stamp = "2026-01-01T00:00:00.000Z"
    # Written in bulk (the store's writes would insert into the HNSW index row by row), the index built after.
    with psycopg.connect(url) as conn:
        conn.execute("DROP INDEX embeddings_hnsw")
        with conn.cursor().copy("COPY documents (id, title, doc_type, size_bytes, sha256, created_at, updated_at) "
                                "FROM STDIN") as copy:
            for ident, _, _ in rows:
                copy.write_row((ident, "t", "note", 1, "x", stamp, stamp))
        with conn.cursor().copy("COPY document_tags (document_id, tag) FROM STDIN") as copy:
            for ident, tag, _ in rows:
                copy.write_row((ident, tag))
        with conn.cursor().copy("COPY chunks (id, document_id, chunk_index, title, text, text_sha256) FROM STDIN") as copy:
            for ident, _, _ in rows:
                copy.write_row((ident, ident, 0, "t", "x", "x"))
        with conn.cursor().copy("COPY embeddings (chunk_id, vector) FROM STDIN") as copy:
            for ident, _, v in rows:
                copy.write_row((ident, vectors.vector_literal(v)))
        conn.execute(schema.HNSW_INDEX)
        conn.execute("ANALYZE")
    with db.snapshot() as conn:
        found = vectors.nearest(conn, query, 5, DocumentFilter(tags=("collection:b",)), None, None, 128)
    assert len(found) == 5 and found[0][0] == 1 and abs(found[0][1] - 0.5) < 0.01
    assert [score for _, score in found] == sorted((score for _, score in found), reverse=True)
