"""POST /jobs (notes and uploads), the queue endpoints, Idempotency-Key, failed jobs, limits."""

from __future__ import annotations

import io
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import flask
import pytest
from flask.testing import FlaskClient

from kb_bridge.local_engine.store.sqlite import schema as migrations
from kb_bridge.testing.engine_app import API, add_note, error_code, make_docx, make_pdf, upload, wait_job

# The engine API suite: every test here runs once per store (tests/engine/conftest.py).
pytestmark = pytest.mark.both_stores


def test_note_job_is_accepted_at_once_and_produces_a_document(client: FlaskClient) -> None:
    response = client.post(f"{API}/jobs", json={"text": "remember the milk", "tags": ["collection:memory"],
                                                "source_path": "notes/milk"})
    assert response.status_code == 202
    job = response.json
    assert job["type"] == "note" and job["status"] in ("queued", "running", "done")
    assert set(job) == {"id", "type", "status", "document_id", "filename", "error", "created_at",
                        "started_at", "finished_at", "priority", "tags"}
    assert job["tags"] == ["collection:memory"]
    assert job["priority"] == "interactive"  # a small note goes before bulk work
    done = wait_job(client, job["id"])
    assert done["status"] == "done" and done["finished_at"] and done["started_at"]
    document = client.get(f"{API}/documents/{done['document_id']}").json
    assert document["doc_type"] == "note"
    assert document["content"] == "remember the milk"
    assert document["title"] == "remember the milk"
    assert document["tags"] == ["collection:memory"]
    assert document["source_path"] == "notes/milk"
    assert document["version"] == 1
    assert document["created_at"].endswith("Z") and document["updated_at"] == document["created_at"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "text"),
        ({"text": ""}, "text"),
        ({"text": 5}, "text"),
        ({"text": "x", "tags": "a"}, "tags"),
        ({"text": "x", "tags": [""]}, "tags"),
        ({"text": "x", "tags": ["t" * 201]}, "tags"),
        ({"text": "x", "tags": [1]}, "tags"),
        ({"text": "x", "title": 3}, "title"),
    ],
)
def test_note_validation_names_the_field(client: FlaskClient, body: dict[str, object], field: str) -> None:
    response = client.post(f"{API}/jobs", json=body)
    assert response.status_code == 422 and error_code(response) == "validation_error"
    assert field in response.json["error"]["message"] and response.json["error"]["field"] == field  # field: 3.16
    assert client.get(f"{API}/jobs").json["total"] == 0


def test_a_tag_of_200_characters_with_colon_is_fine(client: FlaskClient) -> None:
    tag = "collection:" + "m" * 189
    assert add_note(client, "long tag", tags=[tag])["tags"] == [tag]


def test_idempotency_key_same_body_returns_the_original_job_and_creates_nothing(client: FlaskClient) -> None:
    headers = {"Idempotency-Key": "k-1"}
    first = client.post(f"{API}/jobs", json={"text": "once"}, headers=headers)
    again = client.post(f"{API}/jobs", json={"text": "once"}, headers=headers)
    assert first.status_code == 202 and again.status_code == 200
    assert again.json["id"] == first.json["id"]
    wait_job(client, first.json["id"])
    assert client.get(f"{API}/jobs").json["total"] == 1
    assert client.get(f"{API}/documents").json["total"] == 1


def test_idempotency_key_with_another_body_is_a_conflict(client: FlaskClient) -> None:
    headers = {"Idempotency-Key": "k-2"}
    assert client.post(f"{API}/jobs", json={"text": "one"}, headers=headers).status_code == 202
    response = client.post(f"{API}/jobs", json={"text": "two"}, headers=headers)
    assert response.status_code == 409 and error_code(response) == "conflict"
    assert client.get(f"{API}/jobs").json["total"] == 1


def test_idempotency_key_expires_after_the_ttl(make_app: Callable[..., flask.Flask]) -> None:
    client = make_app(idempotency_ttl_seconds=0).test_client()
    headers = {"Idempotency-Key": "k-3"}
    first = client.post(f"{API}/jobs", json={"text": "one"}, headers=headers)
    second = client.post(f"{API}/jobs", json={"text": "two"}, headers=headers)
    assert first.status_code == second.status_code == 202
    assert first.json["id"] != second.json["id"]


def test_idempotency_key_on_uploads_compares_file_and_fields(client: FlaskClient) -> None:
    headers = {"Idempotency-Key": "up-1"}
    first = upload(client, "a.txt", b"alpha file", headers=headers, title="A")
    again = upload(client, "a.txt", b"alpha file", headers=headers, title="A")
    other = upload(client, "a.txt", b"another content", headers=headers, title="A")
    assert (first.status_code, again.status_code, other.status_code) == (202, 200, 409)
    assert again.json["id"] == first.json["id"]
    wait_job(client, first.json["id"])
    assert client.get(f"{API}/documents").json["total"] == 1


def test_upload_txt_md_html_pdf_docx(client: FlaskClient) -> None:
    files = {
        "plain.txt": ("txt", "Plain text about otters.".encode("utf-8")),
        "guide.md": ("md", b"# Guide\n\n## Install\n\nRun the installer for beavers."),
        "page.html": ("html", b"<html><head><script>var hidden=1</script></head><body><h1>Title</h1>"
                              b"<p>Herons &amp; egrets.</p></body></html>"),
        "paper.pdf": ("pdf", make_pdf("Kingfishers dive for fish.")),
        "report.docx": ("docx", make_docx("Report", ["Woodpeckers drum on trees."])),
    }
    expected_words = {"plain.txt": "otters", "guide.md": "beavers", "page.html": "Herons & egrets",
                      "paper.pdf": "Kingfishers", "report.docx": "Woodpeckers"}
    for filename, (doc_type, data) in files.items():
        response = upload(client, filename, data, tags=["collection:documents", "birds"], source_path=f"x/{filename}")
        assert response.status_code == 202, response.json
        assert response.json["type"] == "file" and response.json["filename"] == filename
        job = wait_job(client, response.json["id"])
        assert job["status"] == "done", job
        document = client.get(f"{API}/documents/{job['document_id']}").json
        assert document["doc_type"] == doc_type
        assert document["title"] == filename
        assert document["source_path"] == f"x/{filename}"
        assert document["size_bytes"] == len(data)
        assert document["tags"] == ["birds", "collection:documents"]
        assert expected_words[filename] in document["content"]
        assert "hidden" not in document["content"]
    docx_document = client.get(f"{API}/documents", query_string={"doc_type": "docx"}).json["documents"][0]
    assert client.get(f"{API}/documents/{docx_document['id']}").json["content"].startswith("# Report")


def test_upload_tags_as_one_json_array_field(client: FlaskClient) -> None:
    response = upload(client, "t.txt", b"tagged", tags=json.dumps(["a:b", "c"]))
    job = wait_job(client, response.json["id"])
    assert client.get(f"{API}/documents/{job['document_id']}").json["tags"] == ["a:b", "c"]


def test_upload_default_source_path_and_sanitised_filename(client: FlaskClient) -> None:
    response = upload(client, "../../etc/passwd.txt", b"not really")
    assert response.status_code == 202
    job = wait_job(client, response.json["id"])
    assert job["filename"] == "passwd.txt"
    assert client.get(f"{API}/documents/{job['document_id']}").json["source_path"] == "uploads/passwd.txt"


def test_unsupported_file_type_is_415_and_nothing_is_kept(client: FlaskClient, app: flask.Flask) -> None:
    response = upload(client, "program.exe", b"MZ...")
    assert response.status_code == 415 and error_code(response) == "unsupported_media_type"
    staging = app.extensions["kb_engine"].staging
    assert [p for p in staging.directory.rglob("*") if p.is_file()] == []
    assert client.get(f"{API}/jobs").json["total"] == 0


def test_upload_over_the_limit_is_413(make_app: Callable[..., flask.Flask]) -> None:
    app = make_app(max_upload_bytes=1000)
    client = app.test_client()
    # Bigger than the file limit but within the multipart envelope: caught by our own size check.
    response = upload(client, "big.txt", b"x" * 5000)
    assert response.status_code == 413 and error_code(response) == "payload_too_large"
    # Bigger than file limit + envelope: Werkzeug stops reading at the Content-Length.
    response = upload(client, "huge.txt", b"x" * (2 * 1024 * 1024))
    assert response.status_code == 413 and error_code(response) == "payload_too_large"
    assert client.get(f"{API}/jobs").json["total"] == 0
    staging = app.extensions["kb_engine"].staging
    assert [p for p in staging.directory.rglob("*") if p.is_file()] == []


def test_upload_without_file_part_or_with_empty_file_is_422(client: FlaskClient) -> None:
    response = client.post(f"{API}/jobs", data={"title": "x"}, content_type="multipart/form-data")
    assert response.status_code == 422 and "file" in response.json["error"]["message"]
    response = upload(client, "empty.txt", b"")
    assert response.status_code == 422 and error_code(response) == "validation_error"


def test_failed_job_keeps_its_error_message(client: FlaskClient, app: flask.Flask) -> None:
    response = upload(client, "broken.pdf", b"%PDF-1.4 this is not really a pdf")
    job = wait_job(client, response.json["id"])
    assert job["status"] == "failed"
    assert job["document_id"] is None
    assert "pdf" in job["error"].lower()
    assert client.get(f"{API}/jobs/{job['id']}").json["error"] == job["error"]
    assert client.get(f"{API}/status").json["queue"]["failed"] == 1
    staging = app.extensions["kb_engine"].staging
    assert [p for p in staging.directory.glob("*") if p.is_file()] == []  # staged file removed


@pytest.mark.sqlite_only
def test_staged_upload_is_streamed_into_the_data_dir(client: FlaskClient, app: flask.Flask) -> None:
    engine = app.extensions["kb_engine"]
    engine.worker.stop(5)  # keep the job queued so its staged file stays
    response = upload(client, "keep.txt", b"kept until the job is done")
    assert response.status_code == 202
    staged = [p for p in engine.staging.directory.glob("*") if p.is_file()]
    assert len(staged) == 1 and staged[0].read_bytes() == b"kept until the job is done"
    assert list(engine.staging.tmp_directory.iterdir()) == []


def test_on_postgresql_an_upload_waits_in_the_database_not_in_the_replica(make_app: Callable[..., flask.Flask],
                                                                          store: str) -> None:
    if store != "postgresql":
        pytest.skip("PostgreSQL keeps uploads in the database")
    app = make_app()
    engine = app.extensions["kb_engine"]
    engine.worker.stop(5)  # keep the job queued
    response = upload(app.test_client(), "keep.txt", b"kept in the database until the job is done")
    assert response.status_code == 202
    assert [p for p in engine.staging.directory.glob("*") if p.is_file()] == []
    import psycopg

    with psycopg.connect(engine.config.database_url) as conn:
        parts = conn.execute("SELECT data FROM job_uploads WHERE job_id = %s ORDER BY part",
                             (response.json["id"],)).fetchall()
    assert b"".join(bytes(part[0]) for part in parts) == b"kept in the database until the job is done"


def test_list_jobs_filters_newest_first_and_paginates(client: FlaskClient) -> None:
    ok = [wait_job(client, client.post(f"{API}/jobs", json={"text": f"n{i}"}).json["id"]) for i in range(3)]
    failed = wait_job(client, upload(client, "bad.docx", b"not a zip").json["id"])
    listing = client.get(f"{API}/jobs").json
    assert listing["total"] == 4
    assert [job["id"] for job in listing["jobs"]] == [failed["id"], ok[2]["id"], ok[1]["id"], ok[0]["id"]]
    assert client.get(f"{API}/jobs", query_string={"status": "failed"}).json["total"] == 1
    page = client.get(f"{API}/jobs", query_string={"limit": 2, "offset": 1}).json
    assert [job["id"] for job in page["jobs"]] == [ok[2]["id"], ok[1]["id"]] and page["total"] == 4
    response = client.get(f"{API}/jobs", query_string={"status": "bogus"})
    assert response.status_code == 422
    assert client.get(f"{API}/jobs", query_string={"limit": 0}).status_code == 422


def test_unknown_job_is_404(client: FlaskClient) -> None:
    response = client.get(f"{API}/jobs/12345")
    assert response.status_code == 404 and error_code(response) == "not_found"


def test_large_upload_is_hashed_and_chunked_whole(client: FlaskClient) -> None:
    data = (b"line of text for the upload\n" * 110_000)[:3_000_000]
    response = client.post(f"{API}/jobs", data={"file": (io.BytesIO(data), "big.txt")},
                           content_type="multipart/form-data")
    assert response.status_code == 202
    job = wait_job(client, response.json["id"])
    document = client.get(f"{API}/documents", query_string={"doc_type": "txt"}).json["documents"][0]
    import hashlib

    assert job["status"] == "done" and document["sha256"] == hashlib.sha256(data).hexdigest()
    assert document["size_bytes"] == len(data) and document["chunk_count"] > 100


def test_original_returns_the_uploaded_bytes_and_a_notes_text(client: FlaskClient) -> None:
    data = make_pdf("Nightjars hunt at dusk.")
    job = wait_job(client, upload(client, "nächte report.pdf", data, tags=["collection:documents"]).json["id"])
    original = client.get(f"{API}/documents/{job['document_id']}/original")
    assert original.status_code == 200
    assert original.data == data
    assert original.headers["Content-Type"] == "application/pdf"
    disposition = original.headers["Content-Disposition"]
    assert disposition.startswith('attachment; filename="n_chte report.pdf"')
    assert "filename*=UTF-8''n%C3%A4chte%20report.pdf" in disposition

    big = bytes(range(256)) * 12_000  # ~3 MB: more than one piece of the streamed copy
    big = b"words " + big.replace(b"\x00", b"a")
    job = wait_job(client, upload(client, "big.txt", big).json["id"])
    assert job["status"] == "done", job
    assert client.get(f"{API}/documents/{job['document_id']}/original").data == big

    note = add_note(client, "a note's text, as it is")
    text = client.get(f"{API}/documents/{note['id']}/original")
    assert text.status_code == 200 and text.data.decode() == "a note's text, as it is"
    assert text.headers["Content-Type"] == "text/plain; charset=utf-8"

    assert client.delete(f"{API}/documents/{job['document_id']}").status_code == 204
    assert client.get(f"{API}/documents/{job['document_id']}/original").status_code == 404
    assert client.get(f"{API}/documents/987654/original").status_code == 404


def test_a_queued_job_reports_the_tags_its_document_will_get(client: FlaskClient, app: flask.Flask) -> None:
    """Engine 3.7: a job says where its document will be filed before the document exists (the bridge
    decides from this who may see a job)."""
    app.extensions["kb_engine"].worker.stop(5)  # keep the jobs queued: no document yet
    note = client.post(f"{API}/jobs", json={"text": "a queued note", "tags": ["collection:a", "x"]}).json
    file = upload(client, "queued.txt", b"a queued file", tags=["collection:b"]).json
    untagged = client.post(f"{API}/jobs", json={"text": "no tags"}).json
    assert (note["tags"], file["tags"], untagged["tags"]) == (["collection:a", "x"], ["collection:b"], [])
    got = client.get(f"{API}/jobs/{note['id']}").json
    assert got["status"] == "queued" and got["document_id"] is None and got["tags"] == ["collection:a", "x"]
    listed = {j["id"]: j["tags"] for j in client.get(f"{API}/jobs").json["jobs"]}
    assert listed == {note["id"]: ["collection:a", "x"], file["id"]: ["collection:b"], untagged["id"]: []}


def test_a_failed_or_done_job_keeps_its_tags(client: FlaskClient) -> None:
    broken = upload(client, "broken.pdf", b"%PDF-1.4 not really a pdf", tags=["collection:b"]).json
    note = client.post(f"{API}/jobs", json={"text": "a note", "tags": ["collection:a"]}).json
    failed = wait_job(client, broken["id"])
    assert failed["status"] == "failed" and failed["document_id"] is None
    assert failed["tags"] == ["collection:b"]  # the payload is dropped when the job ends; the tags stay
    done = wait_job(client, note["id"])
    assert done["status"] == "done" and done["tags"] == ["collection:a"]


def test_an_update_job_has_no_tags_of_its_own(client: FlaskClient) -> None:
    document = add_note(client, "before", tags=["collection:a"])
    assert client.patch(f"{API}/notes/{document['id']}", json={"text": "after"}).status_code == 200
    update = client.get(f"{API}/jobs").json["jobs"][0]
    assert update["type"] == "update" and update["document_id"] == document["id"] and update["tags"] is None


@pytest.mark.sqlite_only
def test_a_job_queued_before_3_7_reports_null_tags(make_app: Callable[..., flask.Flask], tmp_path: Path) -> None:
    """A database at schema 4 (engine 3.6) gains `jobs.tags`; its old jobs say they do not know (null)."""
    data_dir = tmp_path / "old"
    data_dir.mkdir()
    conn = sqlite3.connect(data_dir / "engine.sqlite3", isolation_level=None)
    assert migrations.migrate(conn, target=4) == 4
    conn.execute("INSERT INTO jobs (type, status, created_at, error, finished_at) "
                 "VALUES ('file', 'failed', '2026-01-01T00:00:00Z', 'broken', '2026-01-01T00:00:01Z')")
    conn.close()
    client = make_app(data_dir=data_dir).test_client()
    assert client.get(f"{API}/jobs/1").json["tags"] is None
    assert client.post(f"{API}/jobs", json={"text": "new", "tags": ["collection:a"]}).json["tags"] == ["collection:a"]
