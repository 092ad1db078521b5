"""Reaching a path below an ingest root one folder at a time, never through a symbolic link.

The walk (ingest_files.py) lists a folder, and the run reads a file, later than the walk saw them: a folder
on the way may have been swapped for a link since (to ~/.ssh, to /etc). O_NOFOLLOW on the whole path guards
its last component only, so every folder from the root down is opened relative to its parent's descriptor
with O_NOFOLLOW | O_DIRECTORY: a link anywhere below the root fails with ELOOP instead of being followed.
Going one name at a time also reaches files whose full path is longer than PATH_MAX (the kernel refuses such a
path in one piece with ENAMETOOLONG).

`root` is a root's real path (ingest_files.Root.path): a folder, or a file given by itself, whose own folder is
what the user named and is opened as given.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_LINK = "it, or a folder on its path, is now a symbolic link, which is not followed"


def open_folder(root: Path, folder: Path) -> int:
    """A descriptor of `folder` (the root or a folder below it); the caller closes it."""
    if folder == root:
        return os.open(root, _FOLDER)
    parent, name = _parent(root, folder)
    try:
        return _open(name, _FOLDER, parent)
    finally:
        os.close(parent)


def open_file(root: Path, path: Path) -> BinaryIO:
    """`path` (the root, or a file below it) opened for reading."""
    parent, name = _parent(root, path)
    try:
        return os.fdopen(_open(name, _FILE, parent), "rb")
    finally:
        os.close(parent)


def lstat(root: Path, path: Path) -> os.stat_result:
    """What lstat says of `path` (the root, or a path below it)."""
    if path == root:
        return os.lstat(root)
    parent, name = _parent(root, path)
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    finally:
        os.close(parent)


def _parent(root: Path, path: Path) -> tuple[int, str]:
    """A descriptor of the folder holding `path`, reached from the root folder by folder, and `path`'s name."""
    if path == root:  # a file given by itself
        return os.open(root.parent, os.O_RDONLY | os.O_DIRECTORY), root.name
    *folders, name = path.relative_to(root).parts
    fd = os.open(root, _FOLDER)
    try:
        for folder in folders:
            below = _open(folder, _FOLDER, fd)
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd, name


def _open(name: str, flags: int, parent: int) -> int:
    try:
        return os.open(name, flags, dir_fd=parent)
    except OSError as exc:
        # Linux answers a link opened with O_NOFOLLOW | O_DIRECTORY with ENOTDIR, as for a plain file: say which.
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(name, parent)):
            raise OSError(errno.ELOOP, _LINK, name) from None
        raise


def _is_link(name: str, parent: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False
