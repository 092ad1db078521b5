"""A file is read in a child process with a time and a memory limit (ingest/file_reader.py): a pathological
one fails its job saying which limit (and the setting), a note sent meanwhile does not wait for it, a job can
be cancelled while its file is read, and a job stopped engines were working on is resumed at most
MAX_RESUMES times (store/base.py).

The slow file is a PDF whose pages all share one content stream: pypdf parses it again for every page, so
these 40 KB take about 0.3 s a page, 100 s (the reviewer's pdf_shared.py). Tests that wait for it to be stopped set a small
time limit, or cancel it.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path

import flask
import pytest

from kb_bridge.local_engine.clock import now_iso, seconds_ago_iso
from kb_bridge.local_engine.config import EngineConfig
from kb_bridge.local_engine.store.backends import open_store
from kb_bridge.local_engine.store.base import MAX_RESUMES, Store, Submission
from kb_bridge.testing.engine_app import API, upload, wait_for, wait_job

pytestmark = pytest.mark.both_stores

# Well under the time the slow PDF takes, well over what a note takes on a loaded machine.
NOTE_DEADLINE_SECONDS = 20.0


def slow_pdf(pages: int = 300, operators: int = 20_000) -> bytes:
    """A PDF of `pages` pages sharing one compressed content stream of `operators` text operators."""
    content = b"BT /F1 12 Tf 10 10 Td " + b"(abcdefgh) Tj " * operators + b"ET"
    compressed = zlib.compress(content, 9)
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Count %d /Kids [%s] >>" % (pages, b" ".join(b"%d 0 R" % (5 + i) for i in range(pages))),
        3: b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(compressed) + compressed + b"\nendstream",
        4: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    for i in range(pages):
        objects[5 + i] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R "
                          b"/Resources << /Font << /F1 4 0 R >> >> >>")
    data, offsets = bytearray(b"%PDF-1.4\n"), {}
    for number in sorted(objects):
        offsets[number] = len(data)
        data += b"%d 0 obj\n" % number + objects[number] + b"\nendobj\n"
    xref, size = len(data), max(objects) + 1
    data += b"xref\n0 %d\n0000000000 65535 f \n" % size
    data += b"".join(b"%010d 00000 n \n" % offsets[number] for number in range(1, size))
    data += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(data)


def status_of(client: flask.testing.FlaskClient, job_id: int) -> str:
    return str(client.get(f"{API}/jobs/{job_id}").json["status"])


def test_a_file_over_the_time_limit_fails_naming_it(make_app: Callable[..., flask.Flask]) -> None:
    client = make_app(parse_timeout=1.0).test_client()
    job = wait_job(client, upload(client, "slow.pdf", slow_pdf()).json["id"])
    assert job["status"] == "failed"
    assert job["error"] == ("reading the file took longer than the limit of 1 s (KB_ENGINE_PARSE_TIMEOUT); "
                            "it was stopped")
    after = wait_job(client, upload(client, "after.html", b"<p>read by a new reader</p>").json["id"])
    assert after["status"] == "done", after


def test_a_note_does_not_wait_for_a_file_being_read_and_the_file_can_be_cancelled(
        make_app: Callable[..., flask.Flask]) -> None:
    client = make_app().test_client()
    slow = upload(client, "slow.pdf", slow_pdf()).json
    wait_for(lambda: status_of(client, slow["id"]) == "running", "the file's read to begin")
    note = client.post(f"{API}/jobs", json={"text": "sent while a file is read"}).json
    wait_for(lambda: status_of(client, note["id"]) == "done", "the note", NOTE_DEADLINE_SECONDS)
    assert status_of(client, slow["id"]) == "running"

    cancelled = client.delete(f"{API}/jobs/{slow['id']}")
    assert cancelled.status_code == 200, cancelled.json
    assert cancelled.json["status"] == "cancelled" and cancelled.json["document_id"] is None
    # The reader was killed, not waited for: the next file is read (by a new reader) long before the slow
    # one would have ended, and the cancelled job stays cancelled.
    after = upload(client, "after.txt", b"read after the cancel")
    wait_for(lambda: status_of(client, after.json["id"]) == "done", "the next file", NOTE_DEADLINE_SECONDS)
    assert status_of(client, slow["id"]) == "cancelled"
    again = client.delete(f"{API}/jobs/{slow['id']}")
    assert again.status_code == 200 and again.json == cancelled.json


def test_a_job_past_its_reading_is_still_not_cancelled(make_app: Callable[..., flask.Flask]) -> None:
    client = make_app().test_client()
    done = wait_job(client, upload(client, "quick.txt", b"quickly read").json["id"])
    refused = client.delete(f"{API}/jobs/{done['id']}")
    assert refused.status_code == 409 and refused.json["error"]["code"] == "conflict"


@pytest.mark.sqlite_only
def test_a_file_over_the_memory_limit_fails_naming_it_and_the_engine_goes_on(
        make_app: Callable[..., flask.Flask]) -> None:
    """32 MiB of byte 0x80, not UTF-8, is read as Windows-1252: 32 Mi euro signs, a str of 64 MiB and 96 MiB
    of UTF-8 to send back; with the reader's own 30 MiB, over 128 MiB."""
    client = make_app(parse_memory=128).test_client()
    job = wait_job(client, upload(client, "big.txt", b"\x80" * (32 * 1024 * 1024)).json["id"])
    assert job["status"] == "failed"
    assert job["error"] == "reading the file needed more memory than the limit of 128 MiB (KB_ENGINE_PARSE_MEMORY)"
    after = wait_job(client, upload(client, "small.txt", b"a small file").json["id"])
    assert after["status"] == "done", after


def test_a_job_left_working_is_resumed_at_most_max_resumes_times(tmp_path: Path, database_url: str | None) -> None:
    """Each stop below is a crash as the next start sees it: the store closed with the jobs still running. A
    claimed file is being read (working) until the worker marks it waiting for the model; a claimed note is
    waiting until the worker marks it (in a model window); only a stop while a job is worked on counts
    against it (Store.set_working)."""
    config = EngineConfig(data_dir=tmp_path / "data", database_url=database_url)
    config.data_dir.mkdir(parents=True)

    def started() -> tuple[Store, int]:
        store = open_store(config)
        store.open()
        resumed, _ = store.recover(seconds_ago_iso(3600), now_iso())
        return store, resumed

    store, _ = started()
    config.uploads_dir.mkdir(parents=True, exist_ok=True)
    (config.uploads_dir / "ends.txt").write_bytes(b"a file whose reading ends the engine")
    job, _ = store.submit(Submission("file", {}, filename="ends.txt", staged_path="ends.txt", priority=2), None,
                          now_iso())
    waiting, _ = store.submit(Submission("note", {"text": "waits for the model"}, priority=2), None, now_iso())
    for _ in range(MAX_RESUMES):
        claimed = [store.claim_job(now_iso()), store.claim_job(now_iso())]
        assert [item.id for item in claimed if item is not None] == [job["id"], waiting["id"]]
        store.close()
        store, resumed = started()
        assert resumed == 2
        assert [store.get_job(item["id"])["status"] for item in (job, waiting)] == ["queued", "queued"]
    assert store.claim_job(now_iso()) is not None and store.claim_job(now_iso()) is not None
    store.close()
    store, resumed = started()
    try:
        assert resumed == 1
        failed = store.get_job(job["id"])
        assert failed["status"] == "failed" and failed["finished_at"]
        assert failed["error"].startswith(f"the engine stopped while running this job {MAX_RESUMES + 1} times")
        assert store.get_job(waiting["id"])["status"] == "queued"  # never blamed, however many stops
        claimed_again = store.claim_job(now_iso())
        assert claimed_again is not None and claimed_again.id == waiting["id"]
        assert store.claim_job(now_iso()) is None
    finally:
        store.close()
