"""The data directory's exclusive lock: one engine process per data directory.

Two engines on one database would both run the job queue and could ingest a job twice. The lock is an
flock on `engine.lock`, released by the kernel when the process ends, also when it is killed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from .errors import DataDirInUse

LOCK_NAME = "engine.lock"


def lock_data_dir(data_dir: Path) -> IO[str]:
    """Take the lock (creating the directory); keep the returned file open for as long as you hold it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    handle = open(data_dir / LOCK_NAME, "a+", encoding="utf-8")
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
