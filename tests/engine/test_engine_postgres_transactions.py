"""The PostgreSQL store's transactions, as the server sees them: a snapshot is read-only repeatable read even
though the level now travels in its BEGIN (set on the pooled connection), the next user of that connection does
not inherit it, and a vector search's HNSW settings last for its own transaction only. A real PostgreSQL 18
(kb_bridge/testing/postgres.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from kb_bridge.local_engine.store.base import DocumentFilter
from kb_bridge.local_engine.store.postgres import schema, vectors
from kb_bridge.local_engine.store.postgres.db import Database
from kb_bridge.testing.postgres import PostgresServer


@pytest.fixture
def db(postgres_server: PostgresServer) -> Iterator[Database]:
    """The store's pool on a fresh database, with one connection: every block below reuses it."""
    database = Database(postgres_server.new_database(), max_connections=1)
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
