"""The upload store contract, run against both stores: the directory store and a real Redis."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from kb_bridge.errors import Conflict, InvalidArgument, LimitExceeded, NotFound
from kb_bridge.uploads.directory import DirectoryStore
from kb_bridge.uploads.names import new_upload_id
from kb_bridge.uploads.store import Upload, UploadStore
from kb_bridge.testing.processes import wait_until

OWNER = "owner-a"


@pytest.fixture(params=["directory", "redis"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest, ttl: float = 600) -> UploadStore:
    if kind == "directory":
        return DirectoryStore(str(tmp_path / "staging"))
    from kb_bridge.uploads.redis_store import RedisStore

    store = RedisStore.from_url(request.getfixturevalue("redis_url"), ttl)
    store._redis.flushdb()  # noqa: SLF001 - each test starts from an empty store
    return store


@pytest.fixture
def store(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> UploadStore:
    return make_store(store_kind, tmp_path, request)


def new_upload(store: UploadStore, size: int = 9, owner: str = OWNER) -> str:
    upload_id = new_upload_id()
    store.create(Upload(upload_id, owner, "f.txt", size, ["collection:documents"], "documents"), 100, 10**9)
    return upload_id


def test_create_get_and_ownership(store: UploadStore) -> None:
    upload_id = new_upload(store)
    assert store.get(upload_id, OWNER).filename == "f.txt"
    with pytest.raises(NotFound):
        store.get(upload_id, "owner-b")
    with pytest.raises(NotFound):
        store.get("../" + upload_id, OWNER)


def test_chunks_are_idempotent_checked_and_read_in_order(store: UploadStore) -> None:
    upload_id = new_upload(store)
    store.put_chunk(upload_id, OWNER, 1, b"def")
    store.put_chunk(upload_id, OWNER, 0, b"abc")
    assert store.put_chunk(upload_id, OWNER, 0, b"abc").received_bytes == 6
    with pytest.raises(Conflict):
        store.put_chunk(upload_id, OWNER, 0, b"xyz")
    with pytest.raises(InvalidArgument):
        store.put_chunk(upload_id, OWNER, 2, b"ghij")  # 10 bytes > total 9
    store.put_chunk(upload_id, OWNER, 2, b"ghi")
    assert store.progress(upload_id, OWNER).chunks == {0: 3, 1: 3, 2: 3}
    assert b"".join(store.read_chunks(upload_id, OWNER, 3)) == b"abcdefghi"


def test_concurrent_duplicates_never_interleave(store: UploadStore) -> None:
    upload_id = new_upload(store, size=2 * 1024 * 1024)
    variants = [bytes([i]) * (2 * 1024 * 1024) for i in range(6)]
    outcomes: list[str] = []

    def put(data: bytes) -> None:
        try:
            store.put_chunk(upload_id, OWNER, 0, data)
            outcomes.append("ok")
        except Conflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=put, args=(v,)) for v in variants]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert b"".join(store.read_chunks(upload_id, OWNER, 1)) in variants
    assert sorted(outcomes) == ["conflict"] * 5 + ["ok"]


def test_finish_result_is_remembered_and_blocks_late_chunks(store: UploadStore) -> None:
    upload_id = new_upload(store, size=3)
    store.put_chunk(upload_id, OWNER, 0, b"abc")
    with store.finishing(upload_id, OWNER) as upload:
        assert upload.result is None
        store.mark_finished(upload_id, OWNER, {"job_id": 5})
    assert store.get(upload_id, OWNER).result == {"job_id": 5}
    with pytest.raises(Conflict):
        store.put_chunk(upload_id, OWNER, 0, b"abc")


def test_no_chunk_lands_while_finishing(store: UploadStore) -> None:
    upload_id = new_upload(store, size=6)
    store.put_chunk(upload_id, OWNER, 0, b"abc")
    errors: list[BaseException] = []
    with store.finishing(upload_id, OWNER):
        writer = threading.Thread(target=lambda: _capture(errors, store.put_chunk, upload_id, OWNER, 1, b"def"))
        writer.start()
        writer.join(0.5)  # the directory store makes it wait for the lock; Redis refuses at once
        store.mark_finished(upload_id, OWNER, {"job_id": 1})
    writer.join(10)
    assert len(errors) == 1 and isinstance(errors[0], Conflict)


def _capture(errors: list[BaseException], fn, *args) -> None:  # type: ignore[no-untyped-def]
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001
        errors.append(exc)


def test_per_owner_limits(store: UploadStore) -> None:
    for _ in range(2):
        store.create(Upload(new_upload_id(), OWNER, "f.txt", 40, [], "documents"), 2, 100)
    with pytest.raises(LimitExceeded):
        store.create(Upload(new_upload_id(), OWNER, "f.txt", 1, [], "documents"), 2, 100)
    with pytest.raises(LimitExceeded):
        store.create(Upload(new_upload_id(), OWNER, "f.txt", 30, [], "documents"), 5, 100)
    store.create(Upload(new_upload_id(), "owner-b", "f.txt", 40, [], "documents"), 2, 100)  # others unaffected


def test_redis_expires_idle_uploads_but_not_one_being_finished(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    store = make_store("redis", tmp_path, request, ttl=1.0)
    idle = new_upload(store)
    busy = new_upload(store, size=3)
    store.put_chunk(busy, OWNER, 0, b"abc")
    with store.finishing(busy, OWNER):
        wait_until(lambda: _gone(store, idle), 10, what="the idle upload to expire")
        time.sleep(1.5)  # not synchronisation: proves the busy upload outlives its 1 s TTL while held
        assert store.get(busy, OWNER) is not None
        assert b"".join(store.read_chunks(busy, OWNER, 1)) == b"abc"


def _gone(store: UploadStore, upload_id: str) -> bool:
    try:
        store.get(upload_id, OWNER)
    except NotFound:
        return True
    return False



def test_cancel_removes_an_open_upload_and_keeps_a_finished_one(store: UploadStore) -> None:
    open_id = new_upload(store)
    store.put_chunk(open_id, OWNER, 0, b"abc")
    assert store.cancel(open_id, "owner-b") is None  # another owner's: as if absent
    cancelled = store.cancel(open_id, OWNER)
    assert cancelled is not None and cancelled.result is None
    with pytest.raises(NotFound):
        store.get(open_id, OWNER)
    assert store.cancel(open_id, OWNER) is None
    assert store.cancel("../" + open_id, OWNER) is None
    assert store.stats() == (0, 0)
    done_id = new_upload(store, size=3)
    store.put_chunk(done_id, OWNER, 0, b"abc")
    store.mark_finished(done_id, OWNER, {"job_id": 5})
    kept = store.cancel(done_id, OWNER)
    assert kept is not None and kept.result == {"job_id": 5}
    assert store.get(done_id, OWNER).result == {"job_id": 5}


def test_cancel_frees_the_owners_limits(store: UploadStore) -> None:
    first = new_upload_id()
    store.create(Upload(first, OWNER, "a.txt", 8, [], "documents"), 1, 8)
    with pytest.raises(LimitExceeded):
        store.create(Upload(new_upload_id(), OWNER, "b.txt", 8, [], "documents"), 1, 8)
    store.cancel(first, OWNER)
    store.create(Upload(new_upload_id(), OWNER, "b.txt", 8, [], "documents"), 1, 8)


def test_open_uploads_lists_only_the_owners_unfinished_uploads(store: UploadStore) -> None:
    first = new_upload(store)
    store.put_chunk(first, OWNER, 0, b"ab")
    second = new_upload(store)
    finished = new_upload(store, size=1)
    store.put_chunk(finished, OWNER, 0, b"x")
    store.mark_finished(finished, OWNER, {"job_id": 1})
    new_upload(store, owner="owner-b")
    listed = store.open_uploads(OWNER)
    assert sorted(u.upload_id for u, _ in listed) == sorted([first, second])
    assert {u.upload_id: p.received_bytes for u, p in listed} == {first: 2, second: 0}
    assert [u.upload_id for u, _ in store.open_uploads("owner-c")] == []


def test_redis_counts_an_upload_kept_alive_past_twice_its_ttl_against_the_owners_limits(
    tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    """An upload kept alive by its chunks stays the owner's: counted against the per-caller limits and listed,
    however long ago it started (the owner's index of uploads expired 2 x TTL after the last start, so an
    upload in use dropped out of the limits, and eight more could be started beside it)."""
    store = make_store("redis", tmp_path, request, ttl=1.0)
    upload_id = new_upload_id()
    store.create(Upload(upload_id, OWNER, "f.txt", 4, [], "documents"), 1, 100)
    store.put_chunk(upload_id, OWNER, 0, b"ab")
    started = time.monotonic()
    while time.monotonic() - started < 2.5:  # activity, not synchronisation: a chunk resent keeps it alive
        store.put_chunk(upload_id, OWNER, 0, b"ab")
        time.sleep(0.2)
    assert store.get(upload_id, OWNER).result is None
    assert [u.upload_id for u, _ in store.open_uploads(OWNER)] == [upload_id]
    with pytest.raises(LimitExceeded):
        store.create(Upload(new_upload_id(), OWNER, "g.txt", 1, [], "documents"), 1, 100)


def _age(store: UploadStore, upload_id: str) -> None:
    """Make an upload's last chunk look older than its TTL (600 s) lets it stay, as when a finish (which keeps
    the sweeper off while it runs) outlived what was left: the directory's time past the TTL; Redis, which
    would drop it, with 2 s to live."""
    if isinstance(store, DirectoryStore):
        path = store._root / OWNER / upload_id  # noqa: SLF001 - the test reaches into the staging layout
        then = time.time() - 605
        os.utime(path, (then, then))
        return
    client = store._redis  # type: ignore[attr-defined]  # noqa: SLF001
    for key in client.scan_iter(match=f"kb-bridge:u:{OWNER}:{upload_id}:*"):
        client.pexpire(key, 2000)


def test_a_finish_that_fails_leaves_the_upload_a_whole_ttl_to_be_finished_again(store: UploadStore) -> None:
    """A finish is activity: one that fails (the engine restarting, a large file's send timing out after minutes)
    leaves the upload its whole idle time, so the agent can finish again; the sweeper took it at once when the
    last chunk was older than the TTL (the directory store: a 600 s send of a large file, then a failure)."""
    upload_id = new_upload(store, size=3)
    store.put_chunk(upload_id, OWNER, 0, b"abc")
    _age(store, upload_id)
    before = time.time()
    with pytest.raises(RuntimeError), store.finishing(upload_id, OWNER):
        raise RuntimeError("the engine went away")
    assert store.progress(upload_id, OWNER).last_activity >= before - 1
    assert store.sweep(600) == 0
    assert b"".join(store.read_chunks(upload_id, OWNER, 1)) == b"abc"
