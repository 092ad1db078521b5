"""What SQLite's planner does with the statements a store runs: for tests that pin a plan's first step."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def traced(conn: sqlite3.Connection) -> Iterator[list[str]]:
    """The statements run on `conn` (with their parameters inlined) while the block runs."""
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        yield statements
    finally:
        conn.set_trace_callback(None)


def plan_start(conn: sqlite3.Connection, statements: list[str], prefix: str) -> str:
    """The first step of the plan of the one traced statement that starts with `prefix`."""
    [statement] = [sql for sql in statements if sql.startswith(prefix)]
    return str(conn.execute(f"EXPLAIN QUERY PLAN {statement}").fetchall()[0][3])
