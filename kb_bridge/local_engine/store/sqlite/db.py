"""SQLite access: one connection per thread, WAL, explicit write transactions.

SQLite connections must not be shared between threads mid-statement, and the server answers on many threads,
so each thread opens its own connection on first use. WAL lets readers run while one writer writes;
`busy_timeout` makes a second writer wait instead of failing; `BEGIN IMMEDIATE` takes the write lock up
front so a read-then-write transaction never dies on a lock upgrade.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from ...errors import StorageFull, sqlite_full

logger = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 10_000
# Values bound per `IN (...)` list: SQLite builds before 3.32 refuse more than 999 parameters in a statement.
IN_PART = 500

T = TypeVar("T")


def in_parts(values: Sequence[T]) -> Iterator[tuple[list[T], str]]:
    """`values` in parts small enough to bind in one statement, each with its `?, ?, ...` placeholders."""
    for start in range(0, len(values), IN_PART):
        part = list(values[start : start + IN_PART])
        yield part, ", ".join("?" * len(part))


def _raise_if_full(error: BaseException) -> None:
    """A transaction refused for want of room as StorageFull: a client is told what to do (507), and the
    ingestion worker keeps a finished job to write again, where any other error fails it."""
    if sqlite_full(error):
        raise StorageFull("the database could not grow") from error


class Database:
    """Hands each thread its own connection to one database file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._closed = False

    def connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._open()
            self._local.conn = conn
        return conn

    def _open(self) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise RuntimeError("database is closed")
            # isolation_level=None: no implicit transactions; we open them explicitly.
            # check_same_thread=False only so that close() may run on the shutdown thread.
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            # NORMAL in WAL mode survives a process crash (what a restart test does); only an OS crash
            # or power loss may lose the last transactions, which is the usual trade for write speed.
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            self._connections.append(conn)
            return conn

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: committed when the block ends, rolled back if it raises."""
        conn = self.connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException as exc:
            # SQLite rolls back itself on some errors (SQLITE_FULL): a ROLLBACK then would fail ("no
            # transaction is active") and hide what did.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            _raise_if_full(exc)
            raise
        try:
            conn.execute("COMMIT")
        except BaseException as exc:
            # A COMMIT that fails (a full disk, an I/O error) can leave the transaction open, and with it the
            # write lock: every later write would wait for it and fail ("database is locked"), this thread's
            # at once ("cannot start a transaction within a transaction"), until a restart.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            _raise_if_full(exc)
            raise

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: several queries that see one consistent state."""
        conn = self.connection()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for conn in connections:
            try:
                conn.close()
            except sqlite3.Error:
                logger.warning("closing a database connection failed", exc_info=True)
