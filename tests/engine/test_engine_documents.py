"""Documents: listing filters, detail, delete (and everything hanging off it), tags, note updates."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

import flask
import pytest
from flask.testing import FlaskClient

from kb_bridge.local_engine.store.base import DocumentFilter

from kb_bridge.testing.engine_app import API, add_note, error_code, upload, wait_for, wait_job

# The engine API suite: every test here runs once per store (tests/engine/conftest.py).
pytestmark = pytest.mark.both_stores


def _count(app: flask.Flask, sql: str, params: Sequence[object] = ()) -> int:
    """One number from the engine's database, whichever store it runs on (SQL with ? placeholders)."""
    config = app.extensions["kb_engine"].config
    if config.database_url:
        import psycopg

        with psycopg.connect(config.database_url) as conn:
            return int(conn.execute(sql.replace("?", "%s"), params).fetchone()[0])  # type: ignore[index]
    with sqlite3.connect(config.database_path) as conn:
        return int(conn.execute(sql, params).fetchone()[0])


def test_document_detail_has_content_and_ordered_chunks(make_app: Callable[..., flask.Flask]) -> None:
    client = make_app(chunk_chars=200, chunk_overlap=20).test_client()
    text = "\n\n".join(f"Paragraph {i} talks about topic number {i} at some length here." for i in range(12))
    document = add_note(client, text)
    assert document["content"] == text
    assert document["chunk_count"] == len(document["chunks"]) > 1
    assert [chunk["index"] for chunk in document["chunks"]] == list(range(document["chunk_count"]))
    assert all(len(chunk["text"]) <= 200 for chunk in document["chunks"])
    assert "Paragraph 11" in document["chunks"][-1]["text"]


def test_get_unknown_document_is_404(client: FlaskClient) -> None:
    response = client.get(f"{API}/documents/77")
    assert response.status_code == 404 and error_code(response) == "not_found"


def test_list_filters(client: FlaskClient) -> None:
    a = add_note(client, "alpha", tags=["collection:memory", "x"], source_path="p/a")
    b = add_note(client, "beta", tags=["collection:memory"], source_path="p/b")
    c_job = wait_job(client, upload(client, "c.md", b"# gamma", tags=["x"]).json["id"])

    def ids(**query: object) -> list[int]:
        listing = client.get(f"{API}/documents", query_string=query).json
        assert listing["total"] == len(listing["documents"]) or "limit" in query
        return [document["id"] for document in listing["documents"]]

    assert ids() == [c_job["document_id"], b["id"], a["id"]]  # newest update first
    assert ids(source_path="p/a") == [a["id"]]
    assert ids(source_path="p") == []  # exact, not a prefix
    assert ids(tag="collection:memory") == [b["id"], a["id"]]
    assert ids(tag=["collection:memory", "x"]) == [a["id"]]  # all must match
    assert ids(doc_type="md") == [c_job["document_id"]]
    assert ids(doc_type="note", tag="x") == [a["id"]]
    listing = client.get(f"{API}/documents", query_string={"limit": 1, "offset": 1}).json
    assert listing["total"] == 3 and [d["id"] for d in listing["documents"]] == [b["id"]]
    listing = client.get(f"{API}/documents", query_string={"tag": "collection:memory", "limit": 1}).json
    assert listing["total"] == 2 and [d["id"] for d in listing["documents"]] == [b["id"]]
    assert client.get(f"{API}/documents", query_string={"limit": 501}).status_code == 422
    assert client.get(f"{API}/documents", query_string={"updated_since": "yesterday"}).status_code == 422


def test_updated_since_and_update_order(client: FlaskClient) -> None:
    first = add_note(client, "first")
    second = add_note(client, "second")
    since = second["updated_at"]
    listing = client.get(f"{API}/documents", query_string={"updated_since": since}).json
    assert [d["id"] for d in listing["documents"]] == [second["id"]]
    # A tag change updates the first document, which then lists first and after `since`.
    client.post(f"{API}/documents/{first['id']}/tags", json={"tags": ["touched"]})
    listing = client.get(f"{API}/documents", query_string={"updated_since": since}).json
    assert [d["id"] for d in listing["documents"]] == [first["id"], second["id"]]
    # An offset timestamp means the same instant.
    plus_one = since.replace("Z", "+01:00")
    hour_later = client.get(f"{API}/documents", query_string={"updated_since": plus_one}).json
    assert hour_later["total"] == 2


def test_a_page_after_a_listed_document_holds_what_follows_it_whatever_changed_before_it(client: FlaskClient) -> None:
    """3.14 `after=<updated_at>,<id>`: keyset paging. Three notes share one update time, so the id breaks the tie."""
    same = "2026-03-01T00:00:00.000Z"
    notes = [add_note(client, f"note {n}", created_at=same if n < 3 else f"2026-03-0{n - 1}T00:00:00Z",
                      tags=["collection:memory"]) for n in range(5)]

    def page(**query: object) -> tuple[list[int], dict[str, object]]:
        listing = client.get(f"{API}/documents", query_string=query).json
        return [d["id"] for d in listing["documents"]], listing

    everything, listing = page()
    assert listing["after"] is None  # answered even when not asked: this engine knows it
    assert everything == [notes[4]["id"], notes[3]["id"], notes[2]["id"], notes[1]["id"], notes[0]["id"]]
    first, _ = page(limit=3)
    seen = client.get(f"{API}/documents/{first[-1]}").json  # notes[2]: a tie with the two that follow
    key = f"{seen['updated_at']},{seen['id']}"
    rest, listing = page(after=key, tag="collection:memory")
    assert rest == everything[3:] and listing["total"] == 5 and listing["after"] == key
    assert page(after=key, limit=1, offset=1)[0] == everything[4:]  # the offset counts from the key
    # What happens before the key moves nothing after it: a seen note deleted, a note added, a seen one updated.
    assert client.delete(f"{API}/documents/{first[0]}").status_code == 204
    add_note(client, "a new note", tags=["collection:memory"])
    client.post(f"{API}/documents/{first[1]}/tags", json={"tags": ["touched"]})
    rest, listing = page(after=key)
    assert rest == everything[3:] and listing["total"] == 5
    # A note after the key that is updated moves ahead of it: the page no longer holds it.
    client.post(f"{API}/documents/{everything[3]}/tags", json={"tags": ["touched"]})
    assert page(after=key)[0] == everything[4:]
    assert page(after=f"{seen['updated_at']},{everything[4]}")[0] == []


@pytest.mark.parametrize("value", [
    "garbage", "2026-03-01T00:00:00.000Z", "2026-03-01T00:00:00.000Z,", ",5", "2026-03-01T00:00:00.000Z,0",
    "2026-03-01T00:00:00.000Z,+5", "2026-03-01T00:00:00.000Z,٥", "2026-03-01T00:00:00.000Z,99999999999999999999",
    "2026-13-01T00:00:00.000Z,5", "2026-03-01T00:00:00+02:00,5", "2026-03-01,5", "2026-03-01T00:00:00.000Z,5,6",
    "٢٠٢٦-03-01T00:00:00.000Z,5", "2026-03-01T00:00:00.1234567Z,5",
])
def test_an_after_that_is_not_a_listed_documents_key_is_422_naming_it(client: FlaskClient, value: str) -> None:
    response = client.get(f"{API}/documents", query_string={"after": value})
    assert response.status_code == 422 and error_code(response) == "validation_error", response.json
    assert response.json["error"]["message"].startswith("after"), response.json


def test_delete_removes_chunks_index_entries_vectors_and_tags(vector_app: flask.Flask) -> None:
    client = vector_app.test_client()
    keep = add_note(client, "the surviving note about herons", tags=["t"])
    gone = add_note(client, "a note about herons that will be deleted", tags=["t", "only-here"])
    store = vector_app.extensions["kb_engine"].store
    assert store.vector_count() == 2
    response = client.delete(f"{API}/documents/{gone['id']}")
    assert response.status_code == 204 and response.data == b""
    assert client.get(f"{API}/documents/{gone['id']}").status_code == 404
    assert client.delete(f"{API}/documents/{gone['id']}").status_code == 404
    assert store.vector_count() == 1
    assert _count(vector_app, "SELECT COUNT(*) FROM chunks WHERE document_id = ?", (gone["id"],)) == 0
    assert _count(vector_app, "SELECT COUNT(*) FROM document_tags WHERE document_id = ?", (gone["id"],)) == 0
    assert _count(vector_app, "SELECT COUNT(*) FROM embeddings") == 1
    assert store.indexes.text.search("deleted", DocumentFilter(), 10) == []
    assert len(store.indexes.text) == 1
    for mode in ("fts", "vector", "hybrid"):
        results = client.post(f"{API}/search", json={"query": "herons", "mode": mode}).json["results"]
        assert [r["document_id"] for r in results] == [keep["id"]]
    assert client.get(f"{API}/tags").json["tags"] == [{"name": "t", "documents": 1}]


def test_tags_add_is_idempotent_and_bumps_version_only_on_change(client: FlaskClient) -> None:
    document = add_note(client, "tagged", tags=["a"])
    response = client.post(f"{API}/documents/{document['id']}/tags", json={"tags": ["b", "collection:memory"]})
    assert response.status_code == 200
    assert response.json == {"id": document["id"], "tags": ["a", "b", "collection:memory"], "version": 2}
    again = client.post(f"{API}/documents/{document['id']}/tags", json={"tags": ["a", "b"]}).json
    assert again["version"] == 2 and again["tags"] == ["a", "b", "collection:memory"]
    assert client.post(f"{API}/documents/999/tags", json={"tags": ["a"]}).status_code == 404
    assert client.post(f"{API}/documents/{document['id']}/tags", json={"tags": []}).status_code == 422
    assert client.post(f"{API}/documents/{document['id']}/tags", json={"tags": "a"}).status_code == 422


@pytest.mark.parametrize("tag, encoded", [("collection:memory", "collection%3Amemory"),
                                          ("a/b c", "a%2Fb%20c"), ("100%", "100%25")])
def test_remove_tag_with_percent_encoded_segment(client: FlaskClient, tag: str, encoded: str) -> None:
    document = add_note(client, "tagged", tags=[tag, "keep"])
    response = client.delete(f"{API}/documents/{document['id']}/tags/{encoded}")
    assert response.status_code == 200, response.json
    assert response.json == {"id": document["id"], "tags": ["keep"], "version": 2}
    response = client.delete(f"{API}/documents/{document['id']}/tags/{encoded}")
    assert response.status_code == 404 and error_code(response) == "not_found"
    assert client.delete(f"{API}/documents/999/tags/keep").status_code == 404


def test_list_tags_with_counts_and_prefix(client: FlaskClient) -> None:
    add_note(client, "one", tags=["collection:memory", "x"])
    add_note(client, "two", tags=["collection:memory", "collection:workspace"])
    assert client.get(f"{API}/tags").json["tags"] == [
        {"name": "collection:memory", "documents": 2},
        {"name": "collection:workspace", "documents": 1},
        {"name": "x", "documents": 1},
    ]
    prefixed = client.get(f"{API}/tags", query_string={"prefix": "collection:"}).json["tags"]
    assert [t["name"] for t in prefixed] == ["collection:memory", "collection:workspace"]
    assert client.get(f"{API}/tags", query_string={"prefix": "collection_"}).json["tags"] == []


def test_list_tags_within_one_tag_counts_only_documents_that_carry_it(client: FlaskClient) -> None:
    add_note(client, "one", tags=["collection:memory", "x", "y"])
    add_note(client, "two", tags=["collection:memory", "x"])
    add_note(client, "three", tags=["collection:work", "x", "z"])
    within = client.get(f"{API}/tags", query_string={"within": "collection:memory"}).json
    assert within == {"within": "collection:memory", "tags": [
        {"name": "collection:memory", "documents": 2}, {"name": "x", "documents": 2}, {"name": "y", "documents": 1}]}
    both = client.get(f"{API}/tags", query_string={"within": "collection:work", "prefix": "z"}).json
    assert both["tags"] == [{"name": "z", "documents": 1}]
    assert client.get(f"{API}/tags", query_string={"within": "nobody"}).json == {"within": "nobody", "tags": []}
    assert "within" not in client.get(f"{API}/tags").json


def test_patch_note_rechunks_keeps_identity_and_bumps_version(vector_app: flask.Flask) -> None:
    client = vector_app.test_client()
    note = add_note(client, "The meeting is on Monday about the quarterly budget.", tags=["collection:memory"])
    response = client.patch(f"{API}/notes/{note['id']}", json={"text": "The meeting moved to Friday; topic: hiring."})
    assert response.status_code == 200
    updated = response.json
    assert updated["id"] == note["id"]
    assert updated["created_at"] == note["created_at"]
    assert updated["updated_at"] > note["updated_at"]
    assert updated["version"] == 2
    assert updated["tags"] == ["collection:memory"]
    assert response.headers["ETag"] == '"2"'
    detail = client.get(f"{API}/documents/{note['id']}").json
    assert detail["content"] == "The meeting moved to Friday; topic: hiring."
    assert [c["text"] for c in detail["chunks"]] == ["The meeting moved to Friday; topic: hiring."]
    assert client.post(f"{API}/search", json={"query": "budget", "mode": "fts"}).json["results"] == []
    hits = client.post(f"{API}/search", json={"query": "hiring on Friday", "mode": "vector"}).json["results"]
    assert hits and hits[0]["document_id"] == note["id"] and "Friday" in hits[0]["text"]
    assert vector_app.extensions["kb_engine"].store.vector_count() == 1  # old chunk's vector gone
    update_jobs = client.get(f"{API}/jobs").json["jobs"]
    assert update_jobs[0]["type"] == "update" and update_jobs[0]["document_id"] == note["id"]


def test_patch_title_only(client: FlaskClient) -> None:
    note = add_note(client, "body text stays", title="Old title")
    updated = client.patch(f"{API}/notes/{note['id']}", json={"title": "New title"}).json
    assert updated["title"] == "New title" and updated["version"] == 2
    detail = client.get(f"{API}/documents/{note['id']}").json
    assert detail["content"] == "body text stays"
    results = client.post(f"{API}/search", json={"query": "New title"}).json["results"]
    assert results and results[0]["title"] == "New title"


def test_patch_if_match(client: FlaskClient) -> None:
    note = add_note(client, "version one")
    stale = client.patch(f"{API}/notes/{note['id']}", json={"text": "v2"}, headers={"If-Match": '"7"'})
    assert stale.status_code == 412 and error_code(stale) == "precondition_failed"
    assert client.get(f"{API}/documents/{note['id']}").json["version"] == 1
    ok = client.patch(f"{API}/notes/{note['id']}", json={"text": "v2"}, headers={"If-Match": '"1"'})
    assert ok.status_code == 200 and ok.json["version"] == 2
    weak = client.patch(f"{API}/notes/{note['id']}", json={"text": "v3"}, headers={"If-Match": 'W/"2"'})
    assert weak.status_code == 200 and weak.json["version"] == 3
    star = client.patch(f"{API}/notes/{note['id']}", json={"text": "v4"}, headers={"If-Match": "*"})
    assert star.status_code == 200 and star.json["version"] == 4


def test_delete_if_match_deletes_only_at_that_version(client: FlaskClient) -> None:
    """3.15: a delete conditional on the version read (a limited token's, which checked the collection at that
    version) leaves a document changed since, a move into another collection included."""
    note = add_note(client, "delete me only as I was")
    client.patch(f"{API}/documents/{note['id']}/tags", json={"add": ["collection:other"]})  # version 2 now
    stale = client.delete(f"{API}/documents/{note['id']}", headers={"If-Match": '"1"'})
    assert stale.status_code == 412 and error_code(stale) == "precondition_failed"
    assert client.get(f"{API}/documents/{note['id']}").status_code == 200
    assert client.delete(f"{API}/documents/{note['id']}", headers={"If-Match": '"2"'}).status_code == 204
    assert client.get(f"{API}/documents/{note['id']}").status_code == 404
    gone = client.delete(f"{API}/documents/{note['id']}", headers={"If-Match": '"2"'})
    assert gone.status_code == 404  # a repeat finds nothing, as without If-Match


def test_patch_refuses_files_unknown_ids_and_empty_bodies(client: FlaskClient) -> None:
    job = wait_job(client, upload(client, "file.txt", b"a file").json["id"])
    response = client.patch(f"{API}/notes/{job['document_id']}", json={"text": "x"})
    assert response.status_code == 409 and error_code(response) == "not_a_note"
    response = client.patch(f"{API}/notes/4242", json={"text": "x"})
    assert response.status_code == 404 and error_code(response) == "not_found"
    note = add_note(client, "note")
    assert client.patch(f"{API}/notes/{note['id']}", json={}).status_code == 422
    assert client.patch(f"{API}/notes/{note['id']}", json={"text": "  "}).status_code == 422


def test_chunk_fetch(client: FlaskClient) -> None:
    note = add_note(client, "a single chunk", tags=["z"], source_path="s/p")
    chunk_id = note["chunks"][0]["id"]
    chunk = client.get(f"{API}/chunks/{chunk_id}").json
    assert chunk == {
        "chunk_id": chunk_id, "document_id": note["id"], "chunk_index": 0, "text": "a single chunk",
        "score": None, "title": "a single chunk", "source_path": "s/p", "doc_type": "note", "tags": ["z"],
        "created_at": note["created_at"], "updated_at": note["updated_at"],
    }
    assert client.get(f"{API}/chunks/{chunk_id + 100}").status_code == 404


def test_status_counts(client: FlaskClient) -> None:
    add_note(client, "n1")
    wait_job(client, upload(client, "f.txt", b"file one").json["id"])
    status = wait_for(lambda: (s := client.get(f"{API}/status").json)["queue"]["done"] == 2 and s, "queue")
    assert status["documents"] == {"total": 2, "notes": 1, "files": 1}
    assert status["chunks"] == 2


NUL = "\x00"


@pytest.mark.parametrize("field", ["text", "title", "source_path"])
def test_a_nul_character_in_a_note_is_refused_naming_the_field(client: FlaskClient, field: str) -> None:
    """PostgreSQL text cannot hold U+0000, so neither store takes it: one rule, refused before any job."""
    body = {"text": "plain words", field: f"before{NUL}after"}
    response = client.post(f"{API}/jobs", json=body)
    assert response.status_code == 422 and error_code(response) == "validation_error", response.json
    assert response.json["error"]["message"].startswith(field) and "U+0000" in response.json["error"]["message"]
    assert client.get(f"{API}/jobs").json["total"] == 0  # refused before a job was queued
    note = add_note(client, "a note to edit")
    if field != "source_path":
        response = client.patch(f"{API}/notes/{note['id']}", json={field: f"x{NUL}y"})
        assert response.status_code == 422 and response.json["error"]["message"].startswith(field)
    assert client.get(f"{API}/documents/{note['id']}").json["version"] == 1


def test_a_nul_character_in_a_filter_or_an_upload_field_is_refused(client: FlaskClient) -> None:
    for query in ({"source_path": f"a{NUL}"}, {"doc_type": NUL}, {"tag": f"t{NUL}"}):
        response = client.get(f"{API}/documents", query_string=query)
        name = next(iter(query))
        assert response.status_code == 422 and response.json["error"]["message"].startswith(name), response.json
    response = client.get(f"{API}/tags", query_string={"prefix": f"p{NUL}"})
    assert response.status_code == 422 and response.json["error"]["message"].startswith("prefix")
    response = client.post(f"{API}/search", json={"query": f"herons{NUL}", "mode": "fts"})
    assert response.status_code == 422 and response.json["error"]["message"].startswith("query")
    response = upload(client, "file.txt", b"words", title=f"t{NUL}")
    assert response.status_code == 422 and response.json["error"]["message"].startswith("title")


def test_a_file_whose_text_holds_nul_characters_is_ingested_without_them(client: FlaskClient) -> None:
    """A binary-ish text file: the parsed text loses its NUL characters, on both stores alike."""
    job = wait_job(client, upload(client, "log.txt", b"start\x00\x00 of the log\x00 end").json["id"])
    assert job["status"] == "done", job
    document = client.get(f"{API}/documents/{job['document_id']}").json
    assert document["content"] == "start of the log end"
    hits = client.post(f"{API}/search", json={"query": "log", "mode": "fts"}).json["results"]
    assert [hit["document_id"] for hit in hits] == [job["document_id"]]
