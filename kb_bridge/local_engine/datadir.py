"""The data directory's exclusive lock: one engine process per data directory.

Two engines on one database would both run the job queue and could ingest a job twice. The lock is an
flock on `engine.lock`, released by the kernel when the process ends, also when it is killed.

The directory holds every note (the database, staged uploads, the indexes), so it is private to its user
(0700): files created in it under a umask of 0022 are world-readable, and only the directory keeps others out.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import IO

from .errors import DataDirInUse, DataDirUnusable

logger = logging.getLogger(__name__)

LOCK_NAME = "engine.lock"


def lock_data_dir(data_dir: Path) -> IO[str]:
    """Take the lock (creating the directory, private); keep the returned file open for as long as you hold it.
    The lock is the engine's first write: a directory it cannot write stops the engine here, in one line."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        make_private(data_dir)
        handle = open(data_dir / LOCK_NAME, "a+", encoding="utf-8")
    except FileExistsError:  # mkdir's answer when the path is a file
        raise DataDirUnusable(f"the data directory {data_dir} is a file, not a directory; use another --data "
                              "directory") from None
    except OSError as exc:
        raise DataDirUnusable(f"the data directory {data_dir} cannot be written: {_reason(exc)}{_HINT}") from None
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock; the one-engine-per-directory rule is then the user's
        return handle
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise DataDirInUse(f"the data directory {data_dir} is in use by another engine (pid {holder})") from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def require_writable(database: Path) -> None:
    """DataDirUnusable when the database file exists but cannot be opened for writing (a read-only or immutable
    file, another user's): checked before serving, since SQLite opens such a file read-only without a word
    and the first write, in gunicorn's worker, would fail with a traceback. Opening it changes nothing."""
    try:
        os.close(os.open(database, os.O_RDWR))
    except FileNotFoundError:
        return  # a new data directory: the engine creates the database
    except OSError as exc:
        raise DataDirUnusable(f"the database {database} cannot be written: {_reason(exc)}{_HINT}") from None


_HINT = "; make it writable for this user or use another --data directory"


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def make_private(data_dir: Path) -> None:
    """Make this user's data directory 0700: one an older engine (or the operator's mkdir) left open to others
    let them read every note. A directory of another user's (a volume set up for this one) is left as it is:
    it cannot be changed from here, and its owner chose who may enter it."""
    status = os.stat(data_dir)
    if status.st_uid == os.geteuid() and stat.S_IMODE(status.st_mode) & 0o077:
        os.chmod(data_dir, 0o700)
        logger.info("made the engine's data directory %s private (0700)", data_dir)
