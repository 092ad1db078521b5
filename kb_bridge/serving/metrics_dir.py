"""The Prometheus multiprocess directory of one server, and the sweep of those their servers left behind.

Each server makes its own directory in the temporary directory (serving/gunicorn.py says why it never takes one
from the environment) and removes it when it exits. A master killed outright (SIGKILL, the OOM killer, a
container's hard stop) cannot, so its directory stayed for good: a few files of counts, 0700, one per such
death. The name now holds the master's process id and its PID namespace, and a server starting sweeps the
directories of masters of its own namespace that no longer run, owned by its own user. Another namespace's
(a container sharing the temporary directory) is never judged: its process ids mean nothing here.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

PREFIX = "kb-bridge-metrics-"


def fresh_metrics_dir() -> str:
    """A new directory (mkdtemp: 0700) for this master, after the sweep of abandoned ones."""
    namespace = _pid_namespace()
    root = tempfile.gettempdir()
    if namespace is not None:
        sweep_abandoned(Path(root), namespace)
        return tempfile.mkdtemp(prefix=f"{PREFIX}{namespace}-{os.getpid()}-", dir=root)
    return tempfile.mkdtemp(prefix=PREFIX, dir=root)  # no namespace to tell: nothing is ever swept


def sweep_abandoned(root: Path, namespace: str) -> list[Path]:
    """Remove the directories under `root` named for a master of `namespace` that no longer runs and owned by
    this user; the ones removed. A directory named otherwise (an older server's, another namespace's), a link,
    or one that cannot be read is left as it is."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        pid = _master_of(entry.name, namespace)
        if pid is None or _running(pid):
            continue
        try:
            found = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def _master_of(name: str, namespace: str) -> int | None:
    """The master's process id in a directory name `<PREFIX><namespace>-<pid>-<random>`, else None."""
    head = f"{PREFIX}{namespace}-"
    if not name.startswith(head):
        return None
    pid, separator, _rest = name[len(head):].partition("-")
    return int(pid) if separator and pid.isascii() and pid.isdigit() and int(pid) > 0 else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process (EPERM), or a question this system will not answer: assume it runs
    return True


def _pid_namespace() -> str | None:
    """An identifier of this process's PID namespace (the inode of /proc/self/ns/pid on Linux), None elsewhere."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return None
