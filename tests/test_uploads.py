"""Chunked uploads through the MCP tools (reliability checklist 17-30), in process.

Cross-process cases (several gunicorn workers, Redis, killed workers) are in tests/e2e.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import responses
from mcp import Client

from kb_bridge.protocol.server import build_server
from kb_bridge.runtime import Bridge
from kb_bridge.uploads.directory import DirectoryStore
from kb_bridge.uploads.names import safe_filename
from kb_bridge.testing.fake_engine import API, make_settings
from kb_bridge.testing.fake_engine import calls_to, job

pytestmark = pytest.mark.anyio


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def start(client: Client, size: int, **extra: Any) -> str:
    result = await client.call_tool("kb_upload_start", {"filename": "file.txt", "total_size": size, **extra})
    assert not result.is_error, result.content
    return str(result.structured_content["upload_id"])


async def send(client: Client, upload_id: str, index: int, data: bytes | str, **extra: Any) -> Any:
    payload = data if isinstance(data, str) else b64(data)
    return await client.call_tool("kb_upload_chunk", {"upload_id": upload_id, "data": payload, "chunk_index": index, **extra})


def error(result: Any) -> dict[str, Any]:
    assert result.is_error, result.content
    return dict(result.structured_content["error"])


def staged_files(bridge: Bridge) -> list[str]:
    return [str(p) for p in Path(bridge.settings.uploads.dir).rglob("chunk-*")]


@pytest.mark.parametrize("bad", ["ab*c", "QQ==QQ==", "QQ=", "QUJD\nRA==", "QUJD RA==", "QUJD-_==", ""])
async def test_17_invalid_base64_is_rejected_and_nothing_stored(client: Client, bridge: Bridge, bad: str) -> None:
    upload_id = await start(client, 10)
    assert error(await send(client, upload_id, 0, bad))["field"] == "data"
    assert staged_files(bridge) == []


async def test_18_encoded_chunk_over_the_limit_is_rejected_before_decoding(tmp_path: Path) -> None:
    bridge = Bridge(make_settings(tmp_path, uploads={"max_chunk_bytes": 1024}))
    async with Client(build_server(bridge)) as client:
        upload_id = await start(client, 4096)
        too_big = "A" * (4 * 1024 // 3 + 8)  # valid base64 alphabet, just too long
        message = error(await send(client, upload_id, 0, too_big))["message"]
    assert "at most 1024 bytes" in message


@pytest.mark.parametrize("index", [-1, 10, 10**12])
async def test_19_chunk_index_out_of_range_is_rejected_without_allocation(client: Client, bridge: Bridge, index: int) -> None:
    upload_id = await start(client, 10)
    assert error(await send(client, upload_id, index, b"x"))["field"] == "chunk_index"
    assert staged_files(bridge) == []


async def test_20_out_of_order_chunks_assemble_by_index(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(type="file"))
    pieces = [os.urandom(1000), os.urandom(1000), os.urandom(500)]
    whole = b"".join(pieces)
    upload_id = await start(client, len(whole), sha256=hashlib.sha256(whole).hexdigest())
    for index in (2, 0, 1):
        assert not (await send(client, upload_id, index, pieces[index])).is_error
    finished = await client.call_tool("kb_upload_finish", {"upload_id": upload_id})
    assert finished.structured_content["sha256"] == hashlib.sha256(whole).hexdigest()
    sent = engine.calls[0].request.body
    assert whole in (sent if isinstance(sent, bytes) else b"".join(sent))


async def test_21_duplicate_chunk_identical_is_harmless_different_is_conflict(client: Client) -> None:
    upload_id = await start(client, 6)
    assert (await send(client, upload_id, 0, b"abc")).structured_content["received_bytes"] == 3
    assert (await send(client, upload_id, 0, b"abc")).structured_content["received_bytes"] == 3
    assert error(await send(client, upload_id, 0, b"xyz"))["code"] == "CONFLICT"


def test_21_concurrent_duplicates_never_interleave(tmp_path: Path) -> None:
    store = DirectoryStore(str(tmp_path))
    from kb_bridge.uploads.store import Upload

    store.create(Upload("a" * 32, "o", "f.txt", 4 * 1024 * 1024, [], "documents"), 10, 10**9)
    variants = [bytes([i]) * (2 * 1024 * 1024) for i in range(8)]
    outcomes: list[str] = []

    def put(data: bytes) -> None:
        try:
            store.put_chunk("a" * 32, "o", 0, data)
            outcomes.append("ok")
        except Exception as exc:  # noqa: BLE001 - the outcome kind is what is asserted
            outcomes.append(type(exc).__name__)

    threads = [threading.Thread(target=put, args=(v,)) for v in variants]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = b"".join(store.read_chunks("a" * 32, "o", 1))
    assert stored in variants  # one writer's bytes, whole
    assert outcomes.count("ok") == 1 and outcomes.count("Conflict") == 7


async def test_22_finish_with_missing_chunks_lists_them_and_stays_resumable(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(type="file"))
    upload_id = await start(client, 30)
    for index in (0, 2):
        await send(client, upload_id, index, b"x" * 10)
    failure = error(await client.call_tool("kb_upload_finish", {"upload_id": upload_id}))
    assert failure["code"] == "UPLOAD_INCOMPLETE" and failure["missing"] == [1]
    assert not engine.calls
    status = await client.call_tool("kb_upload_status", {"upload_id": upload_id})
    assert status.structured_content["missing"] == [1] and status.structured_content["received_chunks"] == [0, 2]
    await send(client, upload_id, 1, b"y" * 10)
    assert not (await client.call_tool("kb_upload_finish", {"upload_id": upload_id})).is_error


async def test_23_size_rules(client: Client, engine: responses.RequestsMock) -> None:
    upload_id = await start(client, 5)
    assert error(await send(client, upload_id, 0, b"123456"))["field"] == "data"  # beyond total_size
    await send(client, upload_id, 0, b"123")
    assert error(await client.call_tool("kb_upload_finish", {"upload_id": upload_id}))["code"] == "UPLOAD_INCOMPLETE"
    for size in (0, -5, 1.5, "10", 10**13):
        result = await client.call_tool("kb_upload_start", {"filename": "a.txt", "total_size": size})
        assert error(result)["field"] == "total_size"
    assert not engine.calls


async def test_24_chunk_sha256_mismatch_discards_chunk(client: Client, bridge: Bridge) -> None:
    upload_id = await start(client, 3)
    bad = await send(client, upload_id, 0, b"abc", sha256=hashlib.sha256(b"abd").hexdigest())
    assert error(bad)["field"] == "sha256"
    assert staged_files(bridge) == []
    good = await send(client, upload_id, 0, b"abc", sha256=hashlib.sha256(b"abc").hexdigest())
    assert not good.is_error


async def test_24_file_sha256_mismatch_refuses_finish_and_sends_nothing(client: Client, engine: responses.RequestsMock) -> None:
    upload_id = await start(client, 3, sha256=hashlib.sha256(b"xyz").hexdigest())
    await send(client, upload_id, 0, b"abc")
    failure = error(await client.call_tool("kb_upload_finish", {"upload_id": upload_id}))
    assert failure["code"] == "CONFLICT" and failure["actual_sha256"] == hashlib.sha256(b"abc").hexdigest()
    assert not engine.calls


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("../../etc/passwd", "passwd"),
        ("/abs/report.pdf", "report.pdf"),
        ("C:\\x\\y.docx", "y.docx"),
        ("a\x00b.txt", "ab.txt"),
        ("line\r\nbreak.md", "linebreak.md"),
        ('quo"te\'s.txt', "quotes.txt"),
        ("evil\u202etxt.exe.md", "eviltxt.exe.md"),
    ],
)
def test_25_filenames_are_reduced_to_a_safe_base_name(raw: str, expected: str) -> None:
    assert safe_filename(raw) == expected


@pytest.mark.parametrize("raw", ["..", ".", "", "/", "C:\\"])
def test_25_filenames_with_nothing_left_are_rejected(raw: str) -> None:
    from kb_bridge.errors import InvalidArgument

    with pytest.raises(InvalidArgument):
        safe_filename(raw)


def test_25_long_filenames_keep_their_extension_within_255_bytes() -> None:
    name = safe_filename("\u00e9" * 300 + ".pdf")
    assert name.endswith(".pdf") and len(name.encode()) <= 255


async def test_25_staging_paths_derive_from_the_id_only(client: Client, bridge: Bridge) -> None:
    upload_id = await start(client, 3, filename="../../../../tmp/evil.txt")
    await send(client, upload_id, 0, b"abc")
    for path in Path(bridge.settings.uploads.dir).rglob("*"):
        assert "evil" not in path.name and ".." not in path.parts


async def test_26_another_callers_upload_is_not_found(tmp_path: Path) -> None:
    bridge = Bridge(make_settings(tmp_path))
    store = bridge.uploads
    async with Client(build_server(bridge)) as client:
        upload_id = await start(client, 3)
    from kb_bridge.errors import NotFound

    with pytest.raises(NotFound) as other:
        store.get(upload_id, "someone-else")
    with pytest.raises(NotFound) as missing:
        store.get("f" * 32, "local")
    assert other.value.message == missing.value.message


@pytest.mark.parametrize("bad_id", ["../x", "../../etc", "A" * 32, "x" * 100, "0" * 31])
async def test_26_malformed_ids_are_not_found_without_touching_files(client: Client, bridge: Bridge, bad_id: str) -> None:
    result = await client.call_tool("kb_upload_status", {"upload_id": bad_id})
    assert error(result)["code"] == "NOT_FOUND"
    assert list(Path(bridge.settings.uploads.dir).iterdir()) == []  # (the root itself is made, 0700, at start)


def test_26_ids_carry_128_random_bits() -> None:
    from kb_bridge.uploads.names import new_upload_id

    ids = {new_upload_id() for _ in range(1000)}
    assert len(ids) == 1000 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


async def test_27_finish_twice_returns_the_same_job_and_one_engine_call(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(31, type="file"))
    upload_id = await start(client, 3)
    await send(client, upload_id, 0, b"abc")
    first = await client.call_tool("kb_upload_finish", {"upload_id": upload_id})
    second = await client.call_tool("kb_upload_finish", {"upload_id": upload_id})
    assert first.structured_content == second.structured_content  # the engine could not say more: as stored
    assert len(calls_to(engine, "POST", "/jobs")) == 1
    late = error(await send(client, upload_id, 0, b"abc"))
    assert late["code"] == "CONFLICT" and late["job_id"] == 31


def test_28_sweeper_never_removes_an_active_upload(tmp_path: Path) -> None:
    from kb_bridge.uploads.store import Upload

    store = DirectoryStore(str(tmp_path))
    store.create(Upload("b" * 32, "o", "f.txt", 10, [], "documents"), 10, 10**9)
    with store.finishing("b" * 32, "o"):  # in use: holds the upload's lock
        assert store.sweep(ttl_seconds=0, now=time.time() + 3600) == 0
    assert store.sweep(ttl_seconds=0, now=time.time() + 3600) == 1
    from kb_bridge.errors import NotFound

    with pytest.raises(NotFound):
        store.get("b" * 32, "o")


async def test_28_activity_postpones_expiry(client: Client, bridge: Bridge) -> None:
    upload_id = await start(client, 6)
    store, ttl = bridge.uploads, 100.0
    directory = next(Path(bridge.settings.uploads.dir).glob(f"*/{upload_id}"))
    os.utime(directory, (time.time() - 150, time.time() - 150))  # idle for 150 s...
    await send(client, upload_id, 0, b"abc")  # ...then active again
    assert store.sweep(ttl) == 0


async def test_28_sweeper_runs_again_after_a_lifespan_restart(tmp_path: Path) -> None:
    """Stopping and starting the bridge (as an ASGI lifespan restart does) leaves a working sweeper:
    an upload that expires after the restart is swept."""
    from kb_bridge.errors import NotFound
    from kb_bridge.uploads.names import new_upload_id
    from kb_bridge.uploads.store import Upload

    bridge = Bridge(make_settings(tmp_path, uploads={"ttl_seconds": 1, "sweep_interval": 0.05}))
    async with bridge.lifespan(None):
        pass  # the first life ends: the sweeper is stopped
    async with bridge.lifespan(None):
        upload_id = new_upload_id()
        bridge.uploads.create(Upload(upload_id, "o", "f.txt", 10, [], "documents"), 10, 10**9)
        directory = next(Path(bridge.settings.uploads.dir).glob(f"*/{upload_id}"))
        os.utime(directory, (time.time() - 3600, time.time() - 3600))  # idle for an hour
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                bridge.uploads.get(upload_id, "o")
            except NotFound:
                return
            await anyio.sleep(0.05)
        pytest.fail("the expired upload was not swept after the lifespan restarted")


async def test_29_per_caller_limits_refuse_start(tmp_path: Path) -> None:
    bridge = Bridge(make_settings(tmp_path, uploads={"max_uploads_per_caller": 2, "max_staged_bytes_per_caller": 100}))
    async with Client(build_server(bridge)) as client:
        await start(client, 10)
        await start(client, 10)
        assert error(await client.call_tool("kb_upload_start", {"filename": "a.txt", "total_size": 1}))["code"] == "LIMIT_EXCEEDED"
    bridge2 = Bridge(make_settings(tmp_path / "b", uploads={"max_staged_bytes_per_caller": 100}))
    async with Client(build_server(bridge2)) as client:
        await start(client, 60)
        failure = error(await client.call_tool("kb_upload_start", {"filename": "a.txt", "total_size": 50}))
    assert failure["code"] == "LIMIT_EXCEEDED" and failure["limit"] == "staged_bytes"


async def test_30_disk_full_is_storage_full_and_leaves_nothing(client: Client, bridge: Bridge, monkeypatch: pytest.MonkeyPatch) -> None:
    upload_id = await start(client, 3)
    real_write = os.write

    def full_disk(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    failure = error(await send(client, upload_id, 0, b"abc"))
    monkeypatch.setattr(os, "write", real_write)
    assert failure["code"] == "STORAGE_FULL"
    leftovers = [p.name for p in Path(bridge.settings.uploads.dir).rglob("*") if p.is_file()]
    assert sorted(leftovers) == [".lock", ".lock", "meta.json"]  # no temp file, no chunk
    assert not (await send(client, upload_id, 0, b"abc")).is_error  # the process and upload are fine


async def test_unknown_file_type_is_refused_at_start(client: Client) -> None:
    result = await client.call_tool("kb_upload_start", {"filename": "tool.exe", "total_size": 10})
    assert error(result)["field"] == "filename"


async def test_finish_reports_progress_when_asked(tmp_path: Path, engine: responses.RequestsMock, era: str) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(type="file"))
    bridge = Bridge(make_settings(tmp_path))
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total))

    async with Client(build_server(bridge), mode=era) as client:
        upload_id = await start(client, 2 * 1024 * 1024)
        await send(client, upload_id, 0, os.urandom(2 * 1024 * 1024))
        await client.call_tool("kb_upload_finish", {"upload_id": upload_id}, progress_callback=on_progress)
    assert seen and seen[-1] == (2 * 1024 * 1024, 2 * 1024 * 1024)



# --- cancel, listing, impossible chunks, a repeated finish (for clients that lose track) -----------------------


async def test_cancel_frees_the_slot_the_reservation_and_the_staged_bytes_at_once(tmp_path: Path) -> None:
    bridge = Bridge(make_settings(tmp_path, uploads={"max_uploads_per_caller": 1, "max_staged_bytes_per_caller": 10}))
    async with Client(build_server(bridge)) as client:
        first = await start(client, 10)
        await send(client, first, 0, b"abc")
        assert staged_files(bridge)
        assert error(await client.call_tool("kb_upload_start", {"filename": "b.txt", "total_size": 1}))["code"] == "LIMIT_EXCEEDED"
        cancelled = await client.call_tool("kb_upload_cancel", {"upload_id": first})
        assert cancelled.structured_content == {"upload_id": first, "cancelled": True, "job_id": None}
        assert staged_files(bridge) == [] and not list(Path(bridge.settings.uploads.dir).glob(f"*/{first}"))
        second = await start(client, 10)  # the slot and the 10-byte reservation are free again
        assert second != first
        again = await client.call_tool("kb_upload_cancel", {"upload_id": first})
        assert not again.is_error and again.structured_content["cancelled"] is False
        assert error(await send(client, first, 1, b"d"))["code"] == "NOT_FOUND"


async def test_cancel_without_an_upload_id_names_the_field(client: Client) -> None:
    assert error(await client.call_tool("kb_upload_cancel", {}))["field"] == "upload_id"


async def test_cancel_of_a_finished_upload_keeps_its_job(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(31, type="file"))
    upload_id = await start(client, 3)
    await send(client, upload_id, 0, b"abc")
    await client.call_tool("kb_upload_finish", {"upload_id": upload_id})
    result = await client.call_tool("kb_upload_cancel", {"upload_id": upload_id})
    assert result.structured_content == {"upload_id": upload_id, "cancelled": False, "job_id": 31}
    assert "already finished as job 31" in result.content[0].text


async def test_status_without_an_id_lists_the_callers_open_uploads(client: Client) -> None:
    assert (await client.call_tool("kb_upload_status", {})).structured_content == {"uploads": []}
    first = await start(client, 10)
    await send(client, first, 0, b"abc")
    second = await start(client, 4, filename="b.txt")
    listed = (await client.call_tool("kb_upload_status", {})).structured_content["uploads"]
    assert [(u["upload_id"], u["received_bytes"], u["total_size"]) for u in listed] == [(first, 3, 10), (second, 0, 4)]
    assert all(u["expires_at"].endswith("Z") for u in listed)
    await client.call_tool("kb_upload_cancel", {"upload_id": second})
    assert [u["upload_id"] for u in (await client.call_tool("kb_upload_status", {})).structured_content["uploads"]] == [first]


async def test_a_chunk_that_cannot_fit_names_chunk_index_and_the_upload_stays_usable(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(32, type="file"))
    upload_id = await start(client, 6)
    refused = error(await send(client, upload_id, 5, b"ab"))  # chunks 0-4 hold a byte each: 5 + 2 > 6
    assert refused["code"] == "VALIDATION_ERROR" and refused["field"] == "chunk_index"
    status = (await client.call_tool("kb_upload_status", {"upload_id": upload_id})).structured_content
    assert status["received_bytes"] == 0 and status["received_chunks"] == []
    await send(client, upload_id, 0, b"abc")
    await send(client, upload_id, 1, b"def")
    finished = await client.call_tool("kb_upload_finish", {"upload_id": upload_id})
    assert finished.structured_content["job_id"] == 32


async def test_a_repeated_finish_returns_the_jobs_current_status(client: Client, engine: responses.RequestsMock) -> None:
    engine.post(f"{API}/jobs", status=202, json=job(33, type="file", status="queued"))
    engine.get(f"{API}/jobs/33", json=job(33, type="file", status="done", document_id=5))
    upload_id = await start(client, 3)
    await send(client, upload_id, 0, b"abc")
    first = await client.call_tool("kb_upload_finish", {"upload_id": upload_id})
    second = await client.call_tool("kb_upload_finish", {"upload_id": upload_id})
    assert first.structured_content["status"] == "queued"
    assert second.structured_content == {**first.structured_content, "status": "done"}
    assert len(calls_to(engine, "POST", "/jobs")) == 1


# --- whose upload it is: an OAuth subject's tokens own by their reach, and finish checks it again ----------


def _as(bridge: Bridge, principal: Any) -> Any:
    from kb_bridge.tools.spec import ToolContext

    return ToolContext(engine=bridge.engine, uploads=bridge.uploads, settings=bridge.settings, principal=principal)


def test_an_oauth_subjects_tokens_own_uploads_by_what_they_may_reach(tmp_path: Path, engine: responses.RequestsMock) -> None:
    """One person, two clients: a token for collections a and b, and one limited to a (README, "Authorization").
    The narrow one neither sees, fills nor finishes the wide one's upload into b (it would write into b)."""
    from kb_bridge.auth.principal import Principal
    from kb_bridge.errors import NotFound
    from kb_bridge.tools.registry import call

    bridge = Bridge(make_settings(tmp_path))
    wide = Principal("alice", collections=frozenset({"a", "b"}), kind="oauth")
    narrow = Principal("alice", collections=frozenset({"a"}), kind="oauth")
    assert wide.owner != narrow.owner
    assert Principal("alice", collections=frozenset({"b", "a"}), kind="oauth").owner == wide.owner  # its next token
    assert Principal("alice", scopes=frozenset({"kb:read"}), collections=wide.collections, kind="oauth").owner != wide.owner

    upload_id = call(_as(bridge, wide), "kb_upload_start", {"filename": "f.txt", "total_size": 3, "collection": "b"})["upload_id"]
    assert call(_as(bridge, narrow), "kb_upload_status", {})["uploads"] == []
    for name, arguments in (("kb_upload_chunk", {"upload_id": upload_id, "chunk_index": 0, "data": b64(b"abc")}),
                            ("kb_upload_finish", {"upload_id": upload_id}), ("kb_upload_status", {"upload_id": upload_id})):
        with pytest.raises(NotFound):
            call(_as(bridge, narrow), name, arguments)
    assert not calls_to(engine, "POST", "/jobs")
    assert [u["upload_id"] for u in call(_as(bridge, wide), "kb_upload_status", {})["uploads"]] == [upload_id]


def test_finish_refuses_a_collection_the_token_no_longer_reaches(tmp_path: Path, engine: responses.RequestsMock) -> None:
    """A tokens-file entry keeps its name (its owner) when its collections change; the staged upload outlives the
    restart that reads the file again, and finishing it must not write where the token may no longer write."""
    from kb_bridge.auth.principal import Principal
    from kb_bridge.errors import Forbidden
    from kb_bridge.tools.registry import call

    bridge = Bridge(make_settings(tmp_path))
    before = Principal("ci", collections=frozenset({"a", "b"}), kind="token")
    after = Principal("ci", collections=frozenset({"a"}), kind="token")
    upload_id = call(_as(bridge, before), "kb_upload_start", {"filename": "f.txt", "total_size": 3, "collection": "b"})["upload_id"]
    call(_as(bridge, before), "kb_upload_chunk", {"upload_id": upload_id, "chunk_index": 0, "data": b64(b"abc")})
    with pytest.raises(Forbidden, match="'b' is not one of them"):
        call(_as(bridge, after), "kb_upload_finish", {"upload_id": upload_id})
    assert not calls_to(engine, "POST", "/jobs")
    assert call(_as(bridge, after), "kb_upload_status", {"upload_id": upload_id})["received_bytes"] == 3  # still staged
