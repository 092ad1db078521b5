"""The Redis upload store: uploads shared by several bridge hosts behind a load balancer.

`KB_UPLOAD_STORE=redis://host:6379/0` (extra `redis`). Per upload: a metadata string, a hash
of chunk bytes, a hash of chunk sizes, all under keys that contain the owner, so another
caller's upload is simply absent. Every change runs as one Lua script (atomic: a duplicate
index is compared, never interleaved; the total is checked against the declared size) and
refreshes the TTL of all the upload's keys: Redis's own expiry is the sweeper, and an upload in use
is by definition not idle. While a finish streams the file out, a lock key is held and the
TTLs are kept fresh, so a long finish cannot outlive its upload.

Memory: staged bytes live in Redis memory; size Redis for KB_UPLOAD_MAX_STAGED_BYTES times the
callers you expect (or keep the directory store on a shared volume).
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import redis

from kb_bridge.errors import Conflict, KbError, StorageError, StorageFull, UploadExpired
from kb_bridge.uploads.names import is_upload_id
from kb_bridge.uploads.store import Progress, Upload, beyond_total_size, lock_busy, too_many_bytes, too_many_uploads

logger = logging.getLogger(__name__)

# Finish reads staged chunks in slices of this size: bounded memory whatever the chunk size.
_BLOCK = 256 * 1024
_LOCK_MS = 30_000

# Chunk bytes live in one string key per chunk (`<base>:c:<index>`), so a finish can read them in
# slices (GETRANGE) and a worker never holds more than a slice of Redis data at once.
# Refreshing TTLs walks the sizes hash to name the chunk keys; fine on a single Redis (not Cluster).

# KEYS: meta, sizes, lock, chunk, owner set. ARGV: index, data, ttl_ms, chunk key prefix, upload id.
_PUT_CHUNK = """
local meta = redis.call('GET', KEYS[1])
if not meta then return {'missing'} end
if redis.call('EXISTS', KEYS[3]) == 1 then return {'finishing'} end
local m = cjson.decode(meta)
if type(m['result']) == 'table' then return {'finished', tostring(m['result']['job_id'])} end
local existing = redis.call('GET', KEYS[4])
if existing then
  if existing ~= ARGV[2] then return {'conflict'} end
else
  local total = 0
  for _, size in ipairs(redis.call('HVALS', KEYS[2])) do total = total + tonumber(size) end
  if total + string.len(ARGV[2]) > tonumber(m['total_size']) then return {'too_big', tostring(total + string.len(ARGV[2]))} end
  redis.call('SET', KEYS[4], ARGV[2])
  redis.call('HSET', KEYS[2], ARGV[1], string.len(ARGV[2]))
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
for _, index in ipairs(redis.call('HKEYS', KEYS[2])) do redis.call('PEXPIRE', ARGV[4] .. index, ARGV[3]) end
redis.call('SADD', KEYS[5], ARGV[5])
redis.call('PEXPIRE', KEYS[5], ARGV[3] * 2)
return {'ok'}
"""

# KEYS: owner set. ARGV: key prefix for the owner's uploads, new id, meta json, ttl_ms,
# max uploads, max staged bytes, new total size.
_CREATE = """
local active, reserved = 0, 0
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local meta = redis.call('GET', ARGV[1] .. id .. ':meta')
  if not meta then
    redis.call('SREM', KEYS[1], id)
  else
    local m = cjson.decode(meta)
    if type(m['result']) ~= 'table' then
      active = active + 1
      reserved = reserved + tonumber(m['total_size'])
    end
  end
end
if active >= tonumber(ARGV[5]) then return {'uploads', tostring(active)} end
if reserved + tonumber(ARGV[7]) > tonumber(ARGV[6]) then return {'staged_bytes', tostring(reserved)} end
redis.call('SET', ARGV[1] .. ARGV[2] .. ':meta', ARGV[3], 'PX', ARGV[4])
redis.call('SADD', KEYS[1], ARGV[2])
-- The owner's index outlives each of its uploads: every change to one of them (_PUT_CHUNK, _TOUCH) sets it to
-- twice the TTL again, so an upload kept alive by its chunks is never dropped from the owner's limits.
redis.call('PEXPIRE', KEYS[1], ARGV[4] * 2)
return {'ok'}
"""

# KEYS: lock. ARGV: token.
_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# KEYS: meta, sizes, owner set. ARGV: ttl_ms, chunk key prefix, upload id.
_TOUCH = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  redis.call('SADD', KEYS[3], ARGV[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[1] * 2)
end
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[1]) end
for _, index in ipairs(redis.call('HKEYS', KEYS[2])) do redis.call('PEXPIRE', ARGV[2] .. index, ARGV[1]) end
return 1
"""

# KEYS: meta, sizes, owner set. ARGV: chunk key prefix, upload id. Removes an unfinished upload:
# 'cancelled' (with its meta), 'finished' (kept; with its meta) or 'missing'.
_CANCEL = """
local meta = redis.call('GET', KEYS[1])
if not meta then return {'missing'} end
if type(cjson.decode(meta)['result']) == 'table' then return {'finished', meta} end
for _, index in ipairs(redis.call('HKEYS', KEYS[2])) do redis.call('DEL', ARGV[1] .. index) end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SREM', KEYS[3], ARGV[2])
return {'cancelled', meta}
"""

# KEYS: sizes. ARGV: chunk key prefix. Drops every chunk and the sizes hash.
_DROP_CHUNKS = """
for _, index in ipairs(redis.call('HKEYS', KEYS[1])) do redis.call('DEL', ARGV[1] .. index) end
redis.call('DEL', KEYS[1])
return 1
"""


class RedisStore:
    def __init__(self, client: redis.Redis, ttl_seconds: float, prefix: str = "kb-bridge") -> None:
        self._redis = client
        self._ttl_ms = int(ttl_seconds * 1000)
        self._prefix = prefix
        self._put_chunk = client.register_script(_PUT_CHUNK)
        self._create = client.register_script(_CREATE)
        self._unlock = client.register_script(_UNLOCK)
        self._touch = client.register_script(_TOUCH)
        self._drop_chunks = client.register_script(_DROP_CHUNKS)
        self._cancel = client.register_script(_CANCEL)

    @classmethod
    def from_url(cls, url: str, ttl_seconds: float) -> RedisStore:
        return cls(redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5, health_check_interval=30), ttl_seconds)

    # --- keys ------------------------------------------------------------------------------------

    def _base(self, owner: str) -> str:
        return f"{self._prefix}:u:{owner}:"

    def _owner_set(self, owner: str) -> str:
        """The set of the owner's upload ids, which the per-caller limits count (_CREATE)."""
        return f"{self._prefix}:o:{owner}"

    def _keys(self, upload_id: str, owner: str) -> tuple[str, str, str, str]:
        """(meta, chunk key prefix, sizes, lock) of an upload."""
        if not is_upload_id(upload_id):
            raise UploadExpired()
        base = self._base(owner) + upload_id
        return f"{base}:meta", f"{base}:c:", f"{base}:sizes", f"{base}:lock"

    # --- the interface ---------------------------------------------------------------------------------

    def create(self, upload: Upload, max_uploads: int, max_staged_bytes: int) -> None:
        with _redis_errors():
            outcome = self._create(
                keys=[self._owner_set(upload.owner)],
                args=[
                    self._base(upload.owner), upload.upload_id, json.dumps(upload.to_json()), self._ttl_ms,
                    max_uploads, max_staged_bytes, upload.total_size,
                ],
            )
        verdict = outcome[0].decode()
        if verdict == "uploads":
            raise too_many_uploads(int(outcome[1]), max_uploads)
        if verdict == "staged_bytes":
            raise too_many_bytes(int(outcome[1]), max_staged_bytes)

    def get(self, upload_id: str, owner: str) -> Upload:
        meta_key = self._keys(upload_id, owner)[0]
        with _redis_errors():
            raw = cast("bytes | None", self._redis.get(meta_key))
        if raw is None:
            raise UploadExpired()
        return Upload.from_json(json.loads(raw))

    def progress(self, upload_id: str, owner: str) -> Progress:
        meta_key, _, sizes_key, _ = self._keys(upload_id, owner)
        with _redis_errors():
            pipe = self._redis.pipeline()
            pipe.hgetall(sizes_key)
            pipe.pttl(meta_key)
            sizes, ttl_left = pipe.execute()
        if ttl_left < 0:
            raise UploadExpired()
        last_activity = time.time() - (self._ttl_ms - ttl_left) / 1000
        return Progress(chunks={int(k): int(v) for k, v in sizes.items()}, last_activity=last_activity)

    def put_chunk(self, upload_id: str, owner: str, index: int, data: bytes) -> Progress:
        meta_key, chunk_prefix, sizes_key, lock_key = self._keys(upload_id, owner)
        with _redis_errors():
            outcome = self._put_chunk(
                keys=[meta_key, sizes_key, lock_key, f"{chunk_prefix}{index}", self._owner_set(owner)],
                args=[str(index), data, self._ttl_ms, chunk_prefix, upload_id],
            )
        verdict = outcome[0].decode()
        if verdict == "missing":
            raise UploadExpired()
        if verdict == "finishing":
            raise Conflict("this upload is being finished right now; check it with kb_upload_status")
        if verdict == "finished":
            raise Conflict("this upload is already finished", job_id=int(outcome[1]))
        if verdict == "conflict":
            raise Conflict(
                f"chunk {index} was already received with different bytes; start a new upload if the file changed",
                chunk_index=index,
            )
        if verdict == "too_big":
            raise beyond_total_size(int(outcome[1]), self.get(upload_id, owner).total_size)
        return self.progress(upload_id, owner)

    def cancel(self, upload_id: str, owner: str) -> Upload | None:
        if not is_upload_id(upload_id):
            return None
        meta_key, chunk_prefix, sizes_key, lock_key = self._keys(upload_id, owner)
        try:
            with self._lock(meta_key, lock_key):  # waits for a finish in progress
                with _redis_errors():
                    outcome = self._cancel(keys=[meta_key, sizes_key, self._owner_set(owner)], args=[chunk_prefix, upload_id])
        except UploadExpired:
            return None
        if outcome[0].decode() == "missing":
            return None
        return Upload.from_json(json.loads(outcome[1]))

    def open_uploads(self, owner: str) -> list[tuple[Upload, Progress]]:
        with _redis_errors():
            ids = sorted(member.decode() for member in cast("set[bytes]", self._redis.smembers(self._owner_set(owner))))
        found = []
        for upload_id in ids:
            try:
                upload = self.get(upload_id, owner)
                if upload.result is None:
                    found.append((upload, self.progress(upload_id, owner)))
            except UploadExpired:
                continue
        return sorted(found, key=lambda pair: pair[0].created_at)

    @contextmanager
    def lock(self, name: str, timeout: float) -> Iterator[None]:
        key, token = f"{self._prefix}:lock:{name}", secrets.token_hex(16)
        deadline = time.monotonic() + timeout
        with _redis_errors():
            while not self._redis.set(key, token, nx=True, px=_LOCK_MS):
                if time.monotonic() >= deadline:
                    raise lock_busy(name)
                time.sleep(0.02)
        try:
            yield
        finally:
            with _redis_errors():
                self._unlock(keys=[key], args=[token])

    @contextmanager
    def _lock(self, meta_key: str, lock_key: str) -> Iterator[str]:
        """Hold the upload's lock (waiting while another host holds it); UploadExpired if it goes away."""
        token = secrets.token_hex(16)
        with _redis_errors():
            while not self._redis.set(lock_key, token, nx=True, px=_LOCK_MS):
                if not self._redis.exists(meta_key):
                    raise UploadExpired()
                time.sleep(0.1)
        try:
            yield token
        finally:
            with _redis_errors():
                self._unlock(keys=[lock_key], args=[token])

    @contextmanager
    def finishing(self, upload_id: str, owner: str) -> Iterator[Upload]:
        meta_key, chunk_prefix, sizes_key, lock_key = self._keys(upload_id, owner)
        # Another host may be finishing this upload: wait for it (its result will be ours).
        with self._lock(meta_key, lock_key) as token:
            keys, more = [meta_key, sizes_key, self._owner_set(owner)], [chunk_prefix, upload_id]
            # A finish is activity: the upload's full TTL at its start and again at its end, however it ends, so
            # one that fails (the engine restarting) never leaves the upload seconds from expiry.
            with _redis_errors():
                self._touch(keys=keys, args=[self._ttl_ms, *more])
            stop = threading.Event()
            keeper = threading.Thread(target=self._keep_alive, args=(stop, keys, more, lock_key, token), daemon=True)
            keeper.start()
            try:
                yield self.get(upload_id, owner)
            finally:
                stop.set()
                keeper.join()
                try:
                    self._touch(keys=keys, args=[self._ttl_ms, *more])
                except redis.RedisError:  # never in place of the finish's own outcome (its engine job may exist)
                    logger.warning("could not refresh an upload after its finish; Redis unreachable")

    def _keep_alive(self, stop: threading.Event, keys: list[str], more: list[str], lock_key: str, token: str) -> None:
        """While a finish runs, keep the upload and its lock from expiring."""
        while not stop.wait(min(_LOCK_MS / 3000, self._ttl_ms / 3000)):
            try:
                self._touch(keys=keys, args=[self._ttl_ms, *more])
                if self._redis.get(lock_key) == token.encode():
                    self._redis.pexpire(lock_key, _LOCK_MS)
            except redis.RedisError:
                logger.warning("could not refresh an upload being finished; Redis unreachable")

    def read_chunks(self, upload_id: str, owner: str, count: int) -> Iterator[bytes]:
        chunk_prefix = self._keys(upload_id, owner)[1]
        for index in range(count):
            key, start = f"{chunk_prefix}{index}", 0
            while True:
                with _redis_errors():
                    piece = cast(bytes, self._redis.getrange(key, start, start + _BLOCK - 1))
                if not piece:
                    if start == 0:
                        raise UploadExpired()
                    break
                yield piece
                start += len(piece)
                if len(piece) < _BLOCK:
                    break

    def mark_finished(self, upload_id: str, owner: str, result: dict[str, Any]) -> None:
        meta_key, chunk_prefix, sizes_key, _ = self._keys(upload_id, owner)
        upload = self.get(upload_id, owner)
        upload.result = result
        with _redis_errors():
            self._redis.set(meta_key, json.dumps(upload.to_json()), px=self._ttl_ms)
            self._drop_chunks(keys=[sizes_key], args=[chunk_prefix])

    def stats(self) -> tuple[int, int]:
        uploads = staged = 0
        with _redis_errors():
            for key in self._redis.scan_iter(match=f"{self._prefix}:u:*:meta", count=500):
                raw = cast("bytes | None", self._redis.get(key))
                if raw is None or json.loads(raw).get("result") is not None:
                    continue
                uploads += 1
                sizes = cast("list[bytes]", self._redis.hvals(key[: -len(b"meta")] + b"sizes"))
                staged += sum(int(size) for size in sizes)
        return uploads, staged

    def sweep(self, ttl_seconds: float, now: float | None = None) -> int:
        """Nothing to do: Redis expires idle uploads itself (their keys carry the TTL)."""
        return 0


@contextmanager
def _redis_errors() -> Iterator[None]:
    """Translate Redis failures once: out of memory is STORAGE_FULL, the rest STORAGE_ERROR."""
    try:
        yield
    except KbError:
        raise
    except redis.ResponseError as exc:
        if "OOM" in str(exc):
            raise StorageFull() from None
        logger.error("upload store (Redis) refused a command: %s", type(exc).__name__)
        raise StorageError() from None
    except redis.RedisError as exc:
        logger.error("upload store (Redis) unreachable: %s", type(exc).__name__)
        raise StorageError("the upload store is unreachable; try again shortly") from None
