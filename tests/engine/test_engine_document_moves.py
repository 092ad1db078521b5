"""PATCH /api/v1/documents/{id}: a new source_path and title in place, nothing re-embedded."""

from __future__ import annotations

import flask
import pytest

from kb_bridge.testing.engine_app import API, error_code, upload, wait_job

# The engine API suite: every test here runs once per store (tests/engine/conftest.py).
pytestmark = pytest.mark.both_stores


def test_a_move_keeps_id_chunks_and_vectors_and_search_follows_the_title(vector_app: flask.Flask) -> None:
    client = vector_app.test_client()
    job = wait_job(client, upload(client, "avocet.md", b"# Field notes\n\nThe lapwings nest on the wet meadow.",
                                  source_path="notes/avocet.md").json["id"])
    doc_id = job["document_id"]
    before = client.get(f"{API}/documents/{doc_id}").json
    vectors = vector_app.extensions["kb_engine"].store.vector_count()
    jobs_before = client.get(f"{API}/status").json["queue"]
    assert client.post(f"{API}/search", json={"query": "avocet", "mode": "fts"}).json["results"]  # the title, indexed

    response = client.patch(f"{API}/documents/{doc_id}", json={"source_path": "birds/plover.md", "title": "plover.md"},
                            headers={"If-Match": f'"{before["version"]}"'})
    assert response.status_code == 200, response.json
    moved = response.json
    assert (moved["id"], moved["source_path"], moved["title"]) == (doc_id, "birds/plover.md", "plover.md")
    assert moved["version"] == before["version"] + 1 and response.headers["ETag"] == f'"{moved["version"]}"'
    after = client.get(f"{API}/documents/{doc_id}").json
    assert [c["id"] for c in after["chunks"]] == [c["id"] for c in before["chunks"]]  # the same chunks
    assert after["sha256"] == before["sha256"] and after["content"] == before["content"]
    assert vector_app.extensions["kb_engine"].store.vector_count() == vectors
    assert client.get(f"{API}/status").json["queue"] == jobs_before  # no job: nothing was read or embedded
    assert [d["id"] for d in client.get(f"{API}/documents", query_string={"source_path": "birds/plover.md"}).json[
        "documents"]] == [doc_id]
    assert client.get(f"{API}/documents", query_string={"source_path": "notes/avocet.md"}).json["documents"] == []
    hits = client.post(f"{API}/search", json={"query": "plover", "mode": "fts"}).json["results"]
    assert [h["document_id"] for h in hits] == [doc_id] and hits[0]["title"] == "plover.md"
    assert client.post(f"{API}/search", json={"query": "avocet", "mode": "fts"}).json["results"] == []
    assert client.post(f"{API}/search", json={"query": "lapwings nest", "mode": "vector"}).json["results"]


def test_a_move_refuses_bad_bodies_stale_versions_and_unknown_ids(vector_app: flask.Flask) -> None:
    client = vector_app.test_client()
    doc_id = wait_job(client, upload(client, "a.txt", b"text", source_path="a.txt").json["id"])["document_id"]
    for body in ({}, {"source_path": " "}, {"title": 3}, {"source_path": "b.txt", "tags": ["x"]},
                 {"source_path": "b\x00.txt"}):
        response = client.patch(f"{API}/documents/{doc_id}", json=body)
        assert response.status_code == 422 and error_code(response) == "validation_error", body
    stale = client.patch(f"{API}/documents/{doc_id}", json={"title": "b.txt"}, headers={"If-Match": '"9"'})
    assert stale.status_code == 412
    missing = client.patch(f"{API}/documents/424242", json={"title": "b.txt"})
    assert missing.status_code == 404 and error_code(missing) == "not_found"
    assert client.get(f"{API}/documents/{doc_id}").json["title"] == "a.txt"
