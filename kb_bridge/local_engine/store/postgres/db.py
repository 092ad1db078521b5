"""PostgreSQL access: a small pool of psycopg 3 connections, explicit transactions, and one translation of
"the database is not there" into StoreUnavailable (HTTP 503 naming PostgreSQL).

Why not psycopg_pool: its background reconnection backs off exponentially (minutes after a long outage),
and the engine must be serving again within a minute of the database's return. Here a request that needs a
connection makes one (connect_timeout below), so the first request after the database is back succeeds.
A pooled connection idle for a while is checked before use, because a restarted server leaves pooled
connections that only fail on their next query.

Every session carries timeouts that keep one stuck party from stopping the others: a statement runs at most
`STATEMENT_TIMEOUT_MS` (a request answers within 15 s even when a lock is held), and a session idle inside a
transaction (a replica frozen with SIGSTOP mid-write) is ended by the server after
`IDLE_IN_TRANSACTION_TIMEOUT_MS`, releasing its locks.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ...database_url import ENCODE
from ...database_url import redacted as redacted  # the store's log lines import it from here
from ...errors import ConfigError, StorageFull, StoreUnavailable

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS = 5
STATEMENT_TIMEOUT_MS = 10_000
IDLE_IN_TRANSACTION_TIMEOUT_MS = 15_000
MAX_CONNECTIONS = 16
# A pooled connection unused for longer than this is pinged before it is handed out.
CHECK_AFTER_SECONDS = 2.0


# SQLSTATE 53100 disk_full: the server could not extend a file. Its transaction is rolled back, nothing of it kept.
DISK_FULL = "53100"


def unavailable(exc: BaseException) -> StoreUnavailable | StorageFull:
    """The error a request gets when PostgreSQL cannot serve it (the driver's text can name the host; never
    a password, which is not in psycopg's messages). A full disk is StorageFull (507, as SQLite's): the client
    learns that nothing was stored and why, where "PostgreSQL is unavailable" sent it to retry at once."""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if getattr(exc, "sqlstate", None) == DISK_FULL:
        return StorageFull(f"PostgreSQL's disk: {reason[:200]}")
    return StoreUnavailable(f"PostgreSQL is unavailable: {reason[:200]}")


class Database:
    """Connections to one PostgreSQL database, one per thread at a time, reused."""

    def __init__(self, url: str, max_connections: int = MAX_CONNECTIONS) -> None:
        self.url = url
        self._idle: list[tuple[psycopg.Connection[Any], float]] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_connections)
        self._closed = False

    def connect(self) -> psycopg.Connection[Any]:
        """A new autocommit connection with the engine's session settings (StoreUnavailable if it fails)."""
        try:
            import psycopg
            from psycopg.rows import tuple_row
        except ImportError:
            raise ConfigError("KB_ENGINE_DATABASE_URL needs the PostgreSQL driver: pip install 'kb-bridge[postgres]'") \
                from None

        options = (f"-c statement_timeout={STATEMENT_TIMEOUT_MS} "
                   f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_MS}")
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS,
                                   options=options, application_name="kb-bridge-engine", row_factory=tuple_row,
                                   keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3)
        except psycopg.OperationalError as exc:
            raise unavailable(exc) from None
        except psycopg.ProgrammingError:
            # libpq could not read the URL; its message quotes the offending part, which may be the password.
            # (database_url.check refuses such URLs first: this is the last line.)
            raise ConfigError(f"the PostgreSQL URL cannot be read (check its ?options); {ENCODE}") from None

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection for the duration of the block; a broken one is discarded, never pooled again."""
        import psycopg

        if not self._slots.acquire(timeout=CONNECT_TIMEOUT_SECONDS * 2):
            raise StoreUnavailable("PostgreSQL is unavailable: every connection of this engine is busy")
        conn = None
        try:
            conn = self._checkout()
            # What a transaction on it begins as (client-side: psycopg writes them into its BEGIN); the server's
            # defaults, read committed and read-write, unless the caller (snapshot) sets its own.
            conn.isolation_level, conn.read_only = None, None
            yield conn
        except psycopg.OperationalError as exc:
            self._discard(conn)
            conn = None
            raise unavailable(exc) from None
        except BaseException:
            if conn is not None and (conn.broken or conn.info.transaction_status != 0):
                self._discard(conn)  # 0: idle; anything else cannot go back to the pool
                conn = None
            raise
        finally:
            if conn is not None:
                self._checkin(conn)
            self._slots.release()

    def _checkout(self) -> psycopg.Connection[Any]:
        import psycopg

        while True:
            with self._lock:
                if self._closed:
                    raise StoreUnavailable("PostgreSQL is unavailable: the engine is stopping")
                item = self._idle.pop() if self._idle else None
            if item is None:
                return self.connect()
            conn, since = item
            if conn.broken or conn.closed:
                continue
            if time.monotonic() - since < CHECK_AFTER_SECONDS:
                return conn
            try:
                conn.execute("SELECT 1")
                return conn
            except psycopg.Error:
                self._discard(conn)

    def _checkin(self, conn: psycopg.Connection[Any]) -> None:
        with self._lock:
            if not self._closed and not conn.broken and not conn.closed:
                self._idle.append((conn, time.monotonic()))
                return
        self._discard(conn)

    @staticmethod
    def _discard(conn: psycopg.Connection[Any] | None) -> None:
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    @contextlib.contextmanager
    def write(self) -> Iterator[psycopg.Connection[Any]]:
        """A read-committed write transaction, committed when the block ends, rolled back if it raises.

        Before commit the change log is sealed (index_log.seal): the transaction's changes get their place
        in commit order."""
        from . import index_log

        with self.connection() as conn, conn.transaction():
            yield conn
            index_log.seal(conn)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[psycopg.Connection[Any]]:
        """A read-only transaction whose queries all see one state (repeatable read)."""
        import psycopg

        with self.connection() as conn:
            # Set on the connection, they go in its BEGIN: one round trip, not a BEGIN and a SET TRANSACTION.
            # A search opens about ten of these (docs/benchmarks.md, "Memory beside a million chunks of files").
            conn.isolation_level, conn.read_only = psycopg.IsolationLevel.REPEATABLE_READ, True
            with conn.transaction():
                yield conn

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            self._discard(conn)
