"""The directory upload store: a staging directory that every worker on a host shares.

Layout: `<root>/<owner>/<upload_id>/` holding `meta.json`, `.lock` and one file per chunk,
`chunk-<index>.bin`. Names are built only from a validated upload id and the caller id, so an
agent's input never names a path, and another caller's upload is simply not under your
directory ("not found", indistinguishable from a missing id).

Links are never followed. The root is checked when the store is made (`check_root`): created 0700, or
an existing directory of this user that no one else may write (a symlink to one is judged by its
target); anything else stops the bridge naming KB_UPLOAD_DIR. Below the root every directory is opened
relative to its parent with O_NOFOLLOW, and every file too: a link planted in the staging area (a chunk
pointing at /etc/passwd, an owner directory pointing elsewhere) makes that upload fail cleanly, and
nothing outside the root is read, written or created.

Crash safety: a chunk is written to a temporary file, fsynced, then hard-linked to its final
name. `link` refuses to replace an existing name, so a chunk index is written once: a worker
killed mid-write leaves only a temporary file that is never read, and two concurrent writers
of the same index cannot interleave bytes. Every change to an upload happens under an
exclusive `flock` on its `.lock` (shared by all processes on the host); the sweeper takes the
same lock without waiting, so it never removes an upload that is in use.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kb_bridge.errors import Conflict, KbError, SettingsError, StorageError, StorageFull, UploadExpired
from kb_bridge.uploads.names import is_upload_id
from kb_bridge.uploads.store import Progress, Upload, beyond_total_size, lock_busy, too_many_bytes, too_many_uploads

logger = logging.getLogger(__name__)

_OWNER_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_CHUNK_RE = re.compile(r"^chunk-(\d{9})\.bin$")
_BLOCK = 1024 * 1024
_META = "meta.json"
_LOCK = ".lock"
_TRASH = ".trash"
_LOCKS = ".locks"
_LOCK_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
_SUBDIR = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW


def chunk_name(index: int) -> str:
    return f"chunk-{index:09d}.bin"


def check_root(root: str) -> None:
    """Make the staging directory (0700), or accept an existing one only if no one else can plant files in
    it: a directory (or a symlink to one) owned by this user and not writable by group or others. One that
    others can read is made 0700. SettingsError naming KB_UPLOAD_DIR otherwise."""
    path = Path(root)
    try:
        os.lstat(path)
    except FileNotFoundError:
        try:
            path.mkdir(parents=True, mode=0o700)
            os.chmod(path, 0o700)  # mkdir's mode is reduced by the umask; make sure
        except OSError as exc:
            raise SettingsError("KB_UPLOAD_DIR", f"cannot create {root}: {exc.strerror}") from None
        return
    try:
        target = os.stat(path)
    except OSError as exc:
        raise SettingsError("KB_UPLOAD_DIR", f"{root} is a broken link or unreadable ({exc.strerror})") from None
    link = " (through a symlink)" if path.is_symlink() else ""
    if not stat.S_ISDIR(target.st_mode):
        raise SettingsError("KB_UPLOAD_DIR", f"{root} is not a directory{link}")
    if target.st_uid != os.geteuid():
        raise SettingsError("KB_UPLOAD_DIR", f"{root}{link} belongs to another user (uid {target.st_uid}); use a directory of your own")
    if target.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise SettingsError(
            "KB_UPLOAD_DIR", f"{root}{link} is writable by group or others (mode {stat.S_IMODE(target.st_mode):04o}); "
            "use a directory only this user can write (chmod 700)"
        )
    if target.st_mode & 0o077:
        os.chmod(path, 0o700)
        logger.info("made the upload staging directory %s private (0700)", root)


class _Dir:
    """An open directory. Every name is opened relative to it and never through a link."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> _Dir:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def sub(self, name: str) -> _Dir:
        return _Dir(os.open(name, _SUBDIR, dir_fd=self.fd))

    def open(self, name: str, flags: int, mode: int = 0o600) -> int:
        return os.open(name, flags | _NOFOLLOW, mode, dir_fd=self.fd)

    def read(self, name: str, limit: int = -1) -> bytes:
        with os.fdopen(self.open(name, os.O_RDONLY), "rb") as f:
            return f.read(limit)

    def write_new(self, name: str, data: bytes) -> None:
        """Create `name` (never replacing anything) holding `data`, fsynced."""
        fd = self.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_atomic(self, name: str, data: bytes) -> None:
        tmp = f".tmp-{secrets.token_hex(8)}"
        try:
            self.write_new(tmp, data)
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            os.fsync(self.fd)
        finally:
            self.unlink(tmp)

    def unlink(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def entries(self) -> list[os.DirEntry[str]]:
        with os.scandir(self.fd) as found:
            return list(found)

    def stat(self, name: str) -> os.stat_result:
        return os.stat(name, dir_fd=self.fd, follow_symlinks=False)


class _Upload:
    """An upload's directory, open, with the owner directory it was found in (to tell if it moved away)."""

    def __init__(self, owner_dir: _Dir, name: str) -> None:
        self.owner_dir = owner_dir
        self.name = name
        self.dir = owner_dir.sub(name)

    def close(self) -> None:
        os.close(self.dir.fd)
        os.close(self.owner_dir.fd)

    def still_there(self) -> bool:
        try:
            return self.owner_dir.stat(self.name).st_ino == os.fstat(self.dir.fd).st_ino
        except FileNotFoundError:
            return False


class DirectoryStore:
    def __init__(self, root: str) -> None:
        check_root(root)
        self._root = Path(root)

    # --- directories and locks -----------------------------------------------------------------

    def _root_dir(self) -> _Dir:
        return _Dir(os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))

    def _owner_dir(self, owner: str, create: bool = False) -> _Dir:
        if not _OWNER_RE.fullmatch(owner):
            raise ValueError("invalid owner id")  # a bug, not an agent's input
        with _traversal(), self._root_dir() as root:
            if create:
                try:
                    os.mkdir(owner, 0o700, dir_fd=root.fd)
                except FileExistsError:
                    pass
            return root.sub(owner)

    @contextmanager
    def _upload(self, upload_id: str, owner: str) -> Iterator[_Upload]:
        if not is_upload_id(upload_id):
            raise UploadExpired()
        with _traversal():
            owner_dir = self._owner_dir(owner)
            try:
                upload = _Upload(owner_dir, upload_id)
            except BaseException:
                os.close(owner_dir.fd)
                raise
        try:
            yield upload
        finally:
            upload.close()

    @contextmanager
    def _locked(self, upload: _Upload, blocking: bool = True) -> Iterator[bool]:
        """Hold the upload's lock exclusively; yields False if `blocking` is off and it is busy."""
        with _traversal():
            fd = upload.dir.open(_LOCK, os.O_RDWR)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            if not upload.still_there():  # the sweeper may have removed it while we waited
                raise UploadExpired()
            yield True
        finally:
            os.close(fd)

    # --- the interface ---------------------------------------------------------------------------

    def create(self, upload: Upload, max_uploads: int, max_staged_bytes: int) -> None:
        with _storage_errors(), self._owner_dir(upload.owner, create=True) as owner_dir:
            fd = owner_dir.open(_LOCK, os.O_RDWR | os.O_CREAT)
            try:
                # Serialise starts per owner so two concurrent starts cannot both pass the limits.
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._check_limits(upload, max_uploads, max_staged_bytes)
                os.mkdir(upload.upload_id, 0o700, dir_fd=owner_dir.fd)
                with owner_dir.sub(upload.upload_id) as directory:
                    os.close(directory.open(_LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL))
                    directory.write_atomic(_META, json.dumps(upload.to_json()).encode())
            finally:
                os.close(fd)

    def _check_limits(self, upload: Upload, max_uploads: int, max_staged_bytes: int) -> None:
        active = [u for u in self._owner_uploads(upload.owner) if u.result is None]
        if len(active) >= max_uploads:
            raise too_many_uploads(len(active), max_uploads)
        reserved = sum(u.total_size for u in active)
        if reserved + upload.total_size > max_staged_bytes:
            raise too_many_bytes(reserved, max_staged_bytes)

    def _owner_uploads(self, owner: str) -> Iterator[Upload]:
        try:
            with self._owner_dir(owner) as owner_dir:
                names = [e.name for e in owner_dir.entries() if is_upload_id(e.name) and e.is_dir(follow_symlinks=False)]
        except UploadExpired:
            return
        for name in names:
            try:
                with self._upload(name, owner) as upload:
                    yield _read_meta(upload.dir)
            except (UploadExpired, StorageError):
                continue

    def get(self, upload_id: str, owner: str) -> Upload:
        with self._upload(upload_id, owner) as upload:
            return _read_meta(upload.dir)

    def cancel(self, upload_id: str, owner: str) -> Upload | None:
        try:
            with self._upload(upload_id, owner) as upload, self._locked(upload):  # waits for a finish in progress
                found = _read_meta(upload.dir)
                if found.result is None:
                    self._discard(upload)
                return found
        except UploadExpired:
            return None

    def open_uploads(self, owner: str) -> list[tuple[Upload, Progress]]:
        found = []
        for upload in self._owner_uploads(owner):
            if upload.result is None:
                try:
                    found.append((upload, self.progress(upload.upload_id, owner)))
                except UploadExpired:
                    continue
        return sorted(found, key=lambda pair: pair[0].created_at)

    def progress(self, upload_id: str, owner: str) -> Progress:
        with self._upload(upload_id, owner) as upload:
            return _progress(upload.dir)

    def put_chunk(self, upload_id: str, owner: str, index: int, data: bytes) -> Progress:
        with self._upload(upload_id, owner) as upload:
            # Write and fsync outside the lock (the slow part); publish under it.
            tmp = f".tmp-{secrets.token_hex(8)}"
            try:
                with _storage_errors():
                    upload.dir.write_new(tmp, data)
                with self._locked(upload):
                    return self._publish(upload.dir, tmp, index, data)
            finally:
                upload.dir.unlink(tmp)

    def _publish(self, directory: _Dir, tmp: str, index: int, data: bytes) -> Progress:
        upload = _read_meta(directory)
        if upload.result is not None:
            raise Conflict("this upload is already finished", job_id=upload.result.get("job_id"))
        final = chunk_name(index)
        before = _progress(directory)
        if index in before.chunks:
            _same_bytes_or_conflict(directory, final, data, index)
            os.utime(directory.fd)
            return _progress(directory)
        if before.received_bytes + len(data) > upload.total_size:
            raise beyond_total_size(before.received_bytes + len(data), upload.total_size)
        with _storage_errors():
            os.link(tmp, final, src_dir_fd=directory.fd, dst_dir_fd=directory.fd, follow_symlinks=False)
            os.fsync(directory.fd)
            os.utime(directory.fd)
        return _progress(directory)

    @contextmanager
    def finishing(self, upload_id: str, owner: str) -> Iterator[Upload]:
        with self._upload(upload_id, owner) as upload, self._locked(upload):
            # A finish is activity: the upload's idle time starts again when it ends, however it ends. The lock
            # keeps the sweeper off while it runs, but a send that outlived the TTL (a large file to a slow
            # engine) and then failed left the upload to the next sweep, before the agent could finish again.
            # Best effort, after the send only: a staging area that cannot be written must not stop a finish
            # (the first review's rule, tests/e2e/test_hardening.py).
            try:
                yield _read_meta(upload.dir)
            finally:
                try:
                    os.utime(upload.dir.fd)
                except OSError:  # never in place of the finish's own outcome (its engine job may exist)
                    logger.warning("could not refresh the idle time of an upload after its finish")

    def read_chunks(self, upload_id: str, owner: str, count: int) -> Iterator[bytes]:
        with self._upload(upload_id, owner) as upload:
            for index in range(count):
                with _traversal():
                    fd = upload.dir.open(chunk_name(index), os.O_RDONLY)
                with os.fdopen(fd, "rb") as f:
                    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                        raise _damaged()
                    while block := f.read(_BLOCK):
                        yield block

    def mark_finished(self, upload_id: str, owner: str, result: dict[str, Any]) -> None:
        with self._upload(upload_id, owner) as upload:
            found = _read_meta(upload.dir)
            found.result = result
            with _storage_errors():
                upload.dir.write_atomic(_META, json.dumps(found.to_json()).encode())
                for entry in upload.dir.entries():
                    if _CHUNK_RE.match(entry.name):
                        upload.dir.unlink(entry.name)
                os.utime(upload.dir.fd)

    @contextmanager
    def lock(self, name: str, timeout: float) -> Iterator[None]:
        if not _LOCK_NAME_RE.fullmatch(name):
            raise ValueError("invalid lock name")  # a bug, not an agent's input
        with _storage_errors(), _traversal(), self._root_dir() as root:
            try:
                os.mkdir(_LOCKS, 0o700, dir_fd=root.fd)
            except FileExistsError:
                pass
            with root.sub(_LOCKS) as locks:
                fd = locks.open(f"{name}.lock", os.O_RDWR | os.O_CREAT)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise lock_busy(name) from None
                    time.sleep(0.02)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def sweep(self, ttl_seconds: float, now: float | None = None) -> int:
        now = time.time() if now is None else now
        removed = sum(1 for owner, name in list(self._upload_names()) if self._expire(owner, name, ttl_seconds, now))
        self._empty_trash()
        return removed

    def stats(self) -> tuple[int, int]:
        uploads = staged = 0
        for owner, name in self._upload_names():
            try:
                with self._upload(name, owner) as upload:
                    if _read_meta(upload.dir).result is None:
                        uploads += 1
                        staged += _progress(upload.dir).received_bytes
            except (UploadExpired, StorageError):
                continue
        return uploads, staged

    def _upload_names(self) -> Iterator[tuple[str, str]]:
        """(owner, upload id) of every upload directory (real directories only, never links)."""
        try:
            with self._root_dir() as root:
                owners = [e.name for e in root.entries() if _OWNER_RE.fullmatch(e.name) and e.is_dir(follow_symlinks=False)]
                for owner in owners:
                    with root.sub(owner) as owner_dir:
                        for entry in owner_dir.entries():
                            if is_upload_id(entry.name) and entry.is_dir(follow_symlinks=False):
                                yield owner, entry.name
        except OSError:
            return

    def _expire(self, owner: str, name: str, ttl_seconds: float, now: float) -> bool:
        try:
            with self._upload(name, owner) as upload:
                if now - os.fstat(upload.dir.fd).st_mtime <= ttl_seconds:
                    return False
                with self._locked(upload, blocking=False) as acquired:
                    # Re-check under the lock: activity may have happened since the first look.
                    if not acquired or now - os.fstat(upload.dir.fd).st_mtime <= ttl_seconds:
                        return False
                    self._discard(upload)
                    return True
        except (UploadExpired, StorageError, FileNotFoundError):
            return False

    def _discard(self, upload: _Upload) -> None:
        """Move an upload out of sight at once (one rename, under its lock), then delete its files."""
        with _storage_errors(), self._root_dir() as root:
            try:
                os.mkdir(_TRASH, 0o700, dir_fd=root.fd)
            except FileExistsError:
                pass
            with root.sub(_TRASH) as trash:
                target = f"{upload.name}-{secrets.token_hex(4)}"
                os.rename(upload.name, target, src_dir_fd=upload.owner_dir.fd, dst_dir_fd=trash.fd)
                shutil.rmtree(target, dir_fd=trash.fd, ignore_errors=True)

    def _empty_trash(self) -> None:
        try:
            with self._root_dir() as root, root.sub(_TRASH) as trash:
                for entry in trash.entries():
                    shutil.rmtree(entry.name, dir_fd=trash.fd, ignore_errors=True)
        except OSError:
            return


# --- errors ------------------------------------------------------------------------------------


@contextmanager
def _storage_errors() -> Iterator[None]:
    """Translate filesystem failures once: a full disk is STORAGE_FULL, the rest STORAGE_ERROR."""
    try:
        yield
    except KbError:
        raise
    except FileNotFoundError:
        raise UploadExpired() from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StorageFull() from None
        logger.error("upload staging failed: %s", exc.strerror)
        raise StorageError() from None


def _damaged() -> StorageError:
    logger.warning("a link or other non-regular file sits in the upload staging area; the upload is refused")
    return StorageError("the upload's staged data is damaged (a link where a file or directory belongs); start a new upload")


@contextmanager
def _traversal() -> Iterator[None]:
    """Opening a name below the root: missing is "not found"; a link (ELOOP) or a file where a directory
    belongs (ENOTDIR) is a damaged staging area, refused without following it."""
    try:
        yield
    except (FileNotFoundError, NotADirectoryError) as exc:
        if isinstance(exc, NotADirectoryError):
            raise _damaged() from None
        raise UploadExpired() from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _damaged() from None
        raise


# --- file helpers ------------------------------------------------------------------------------


def _read_meta(directory: _Dir) -> Upload:
    try:
        with _traversal():
            data = json.loads(directory.read(_META))
    except ValueError:
        logger.error("upload metadata is unreadable; treating the upload as gone")
        raise UploadExpired() from None
    return Upload.from_json(data)


def _progress(directory: _Dir) -> Progress:
    chunks: dict[int, int] = {}
    try:
        for entry in directory.entries():
            match = _CHUNK_RE.match(entry.name)
            if match and entry.is_file(follow_symlinks=False):
                chunks[int(match.group(1))] = entry.stat(follow_symlinks=False).st_size
        last = os.fstat(directory.fd).st_mtime
    except FileNotFoundError:
        raise UploadExpired() from None
    return Progress(chunks=chunks, last_activity=last)


def _same_bytes_or_conflict(directory: _Dir, name: str, data: bytes, index: int) -> None:
    with _traversal():
        existing = directory.read(name, len(data) + 1)
    if existing != data:
        raise Conflict(
            f"chunk {index} was already received with different bytes; start a new upload if the file changed",
            chunk_index=index,
        )
