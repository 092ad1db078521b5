"""The directory upload store: a staging directory that every worker on a host shares.

Layout: `<root>/<owner>/<upload_id>/` holding `meta.json`, `.lock` and one file per chunk,
`chunk-<index>.bin`. Paths are built only from a validated upload id and the caller id, so an
agent's input never names a path, and another caller's upload is simply not under your
directory ("not found", indistinguishable from a missing id).

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
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kb_bridge.errors import Conflict, KbError, StorageError, StorageFull, UploadExpired
from kb_bridge.uploads.names import is_upload_id
from kb_bridge.uploads.store import Progress, Upload, beyond_total_size, too_many_bytes, too_many_uploads

logger = logging.getLogger(__name__)

_OWNER_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_CHUNK_RE = re.compile(r"^chunk-(\d{9})\.bin$")
_BLOCK = 1024 * 1024
_META = "meta.json"
_LOCK = ".lock"
_TRASH = ".trash"


def chunk_name(index: int) -> str:
    return f"chunk-{index:09d}.bin"


class DirectoryStore:
    def __init__(self, root: str) -> None:
        self._root = Path(root)

    # --- paths and locks ---------------------------------------------------------------------

    def _owner_dir(self, owner: str) -> Path:
        if not _OWNER_RE.fullmatch(owner):
            raise ValueError("invalid owner id")  # a bug, not an agent's input
        return self._root / owner

    def _upload_dir(self, upload_id: str, owner: str) -> Path:
        if not is_upload_id(upload_id):
            raise UploadExpired()
        return self._owner_dir(owner) / upload_id

    @contextmanager
    def _locked(self, directory: Path, blocking: bool = True) -> Iterator[bool]:
        """Hold the upload's lock exclusively; yields False if `blocking` is off and it is busy."""
        lock_path = directory / _LOCK
        try:
            fd = os.open(lock_path, os.O_RDWR)
        except FileNotFoundError:
            raise UploadExpired() from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            # The sweeper may have removed the upload while we waited for the lock.
            try:
                still_there = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                still_there = False
            if not still_there:
                raise UploadExpired()
            yield True
        finally:
            os.close(fd)

    # --- the interface ---------------------------------------------------------------------------

    def create(self, upload: Upload, max_uploads: int, max_staged_bytes: int) -> None:
        owner_dir = self._owner_dir(upload.owner)
        with _storage_errors():
            owner_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(owner_dir / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                # Serialise starts per owner so two concurrent starts cannot both pass the limits.
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._check_limits(upload, max_uploads, max_staged_bytes)
                directory = owner_dir / upload.upload_id
                directory.mkdir(mode=0o700)
                (directory / _LOCK).touch(mode=0o600)
                _write_atomic(directory / _META, json.dumps(upload.to_json()).encode())
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
            entries = list(os.scandir(self._owner_dir(owner)))
        except FileNotFoundError:
            return
        for entry in entries:
            if is_upload_id(entry.name):
                try:
                    yield _read_meta(Path(entry.path))
                except UploadExpired:
                    continue

    def get(self, upload_id: str, owner: str) -> Upload:
        return _read_meta(self._upload_dir(upload_id, owner))

    def cancel(self, upload_id: str, owner: str) -> Upload | None:
        try:
            directory = self._upload_dir(upload_id, owner)
            with self._locked(directory):  # waits for a finish in progress
                upload = _read_meta(directory)
                if upload.result is None:
                    self._discard(directory)
                return upload
        except UploadExpired:
            return None

    def open_uploads(self, owner: str) -> list[tuple[Upload, Progress]]:
        found = []
        for upload in self._owner_uploads(owner):
            if upload.result is None:
                try:
                    found.append((upload, _progress(self._upload_dir(upload.upload_id, owner))))
                except UploadExpired:
                    continue
        return sorted(found, key=lambda pair: pair[0].created_at)

    def progress(self, upload_id: str, owner: str) -> Progress:
        return _progress(self._upload_dir(upload_id, owner))

    def put_chunk(self, upload_id: str, owner: str, index: int, data: bytes) -> Progress:
        directory = self._upload_dir(upload_id, owner)
        # Write and fsync outside the lock (the slow part); publish under it.
        tmp = directory / f".tmp-{secrets.token_hex(8)}"
        try:
            with _storage_errors():
                _write_file(tmp, data)
            with self._locked(directory):
                return self._publish(directory, tmp, index, data)
        finally:
            tmp.unlink(missing_ok=True)

    def _publish(self, directory: Path, tmp: Path, index: int, data: bytes) -> Progress:
        upload = _read_meta(directory)
        if upload.result is not None:
            raise Conflict("this upload is already finished", job_id=upload.result.get("job_id"))
        final = directory / chunk_name(index)
        before = _progress(directory)
        if index in before.chunks:
            _same_bytes_or_conflict(final, data, index)
            os.utime(directory)
            return _progress(directory)
        if before.received_bytes + len(data) > upload.total_size:
            raise beyond_total_size(before.received_bytes + len(data), upload.total_size)
        with _storage_errors():
            os.link(tmp, final)
            _fsync_dir(directory)
            os.utime(directory)
        return _progress(directory)

    @contextmanager
    def finishing(self, upload_id: str, owner: str) -> Iterator[Upload]:
        directory = self._upload_dir(upload_id, owner)
        with self._locked(directory):
            yield _read_meta(directory)

    def read_chunks(self, upload_id: str, owner: str, count: int) -> Iterator[bytes]:
        directory = self._upload_dir(upload_id, owner)
        for index in range(count):
            with open(directory / chunk_name(index), "rb") as f:
                while block := f.read(_BLOCK):
                    yield block

    def mark_finished(self, upload_id: str, owner: str, result: dict[str, Any]) -> None:
        directory = self._upload_dir(upload_id, owner)
        upload = _read_meta(directory)
        upload.result = result
        with _storage_errors():
            _write_atomic(directory / _META, json.dumps(upload.to_json()).encode())
            for entry in os.scandir(directory):
                if _CHUNK_RE.match(entry.name):
                    os.unlink(entry.path)
            os.utime(directory)

    def sweep(self, ttl_seconds: float, now: float | None = None) -> int:
        now = time.time() if now is None else now
        removed = sum(1 for directory in list(self._upload_dirs()) if self._expire(directory, ttl_seconds, now))
        self._empty_trash()
        return removed

    def stats(self) -> tuple[int, int]:
        uploads = staged = 0
        for directory in self._upload_dirs():
            try:
                if _read_meta(directory).result is None:
                    uploads += 1
                    staged += _progress(directory).received_bytes
            except UploadExpired:
                continue
        return uploads, staged

    def _upload_dirs(self) -> Iterator[Path]:
        if not self._root.is_dir():
            return
        for owner_entry in os.scandir(self._root):
            if owner_entry.is_dir() and _OWNER_RE.fullmatch(owner_entry.name):
                for entry in os.scandir(owner_entry.path):
                    if is_upload_id(entry.name):
                        yield Path(entry.path)

    def _expire(self, directory: Path, ttl_seconds: float, now: float) -> bool:
        try:
            if now - directory.stat().st_mtime <= ttl_seconds:
                return False
            with self._locked(directory, blocking=False) as acquired:
                # Re-check under the lock: activity may have happened since the first look.
                if not acquired or now - directory.stat().st_mtime <= ttl_seconds:
                    return False
                self._discard(directory)
                return True
        except (UploadExpired, FileNotFoundError):
            return False

    def _discard(self, directory: Path) -> None:
        """Move an upload out of sight at once (one rename, under its lock), then delete its files."""
        trash = self._root / _TRASH
        with _storage_errors():
            trash.mkdir(exist_ok=True, mode=0o700)
            target = trash / f"{directory.parent.name}-{directory.name}-{secrets.token_hex(4)}"
            os.rename(directory, target)
        shutil.rmtree(target, ignore_errors=True)

    def _empty_trash(self) -> None:
        trash = self._root / _TRASH
        if trash.is_dir():
            for entry in os.scandir(trash):
                shutil.rmtree(entry.path, ignore_errors=True)


# --- file helpers ------------------------------------------------------------------------------


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


def _write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".tmp-{secrets.token_hex(8)}")
    try:
        _write_file(tmp, data)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_meta(directory: Path) -> Upload:
    try:
        data = json.loads((directory / _META).read_bytes())
    except (FileNotFoundError, NotADirectoryError):
        raise UploadExpired() from None
    except ValueError:
        logger.error("upload metadata in %s is unreadable; treating the upload as gone", directory.name)
        raise UploadExpired() from None
    return Upload.from_json(data)


def _progress(directory: Path) -> Progress:
    chunks: dict[int, int] = {}
    try:
        for entry in os.scandir(directory):
            match = _CHUNK_RE.match(entry.name)
            if match:
                chunks[int(match.group(1))] = entry.stat().st_size
        last = directory.stat().st_mtime
    except FileNotFoundError:
        raise UploadExpired() from None
    return Progress(chunks=chunks, last_activity=last)


def _same_bytes_or_conflict(path: Path, data: bytes, index: int) -> None:
    with open(path, "rb") as f:
        existing = f.read(len(data) + 1)
    if existing != data:
        raise Conflict(
            f"chunk {index} was already received with different bytes; start a new upload if the file changed",
            chunk_index=index,
        )
