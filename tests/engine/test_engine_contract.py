"""The engine API held to what docs/engine-api.md writes, where an earlier suite left it unpinned: the order
of tags on a PostgreSQL database of a linguistic collation, and the limits, codes and fields the document
names (every test but the locale one runs on both stores)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import flask
import pytest
from flask.testing import FlaskClient

from kb_bridge.local_engine.app import engine_of
from kb_bridge.local_engine.embedding.embedder import Embedder
from kb_bridge.testing.engine_app import API, add_note, wait_job

TAGS = ["collectionb", "collection:z", "B", "a", "Éclair", "e"]


def test_tags_are_listed_in_code_point_order_on_a_database_of_a_linguistic_collation(
    make_app: Callable[..., flask.Flask], linguistic_database_url: str
) -> None:
    """A document's `tags` and GET /tags come "by name" in code points, as SQLite sorts them: PostgreSQL sorted
    them by the database's collation, so in en_US.UTF-8 "a" came before "B" and "collectionb" before
    "collection:z", and the same documents listed their tags in another order on each store."""
    client = make_app(database_url=linguistic_database_url).test_client()
    document = add_note(client, "tags in order", tags=TAGS)
    in_code_points = sorted(TAGS)
    assert document["tags"] == in_code_points
    assert client.get(f"{API}/documents").json["documents"][0]["tags"] == in_code_points
    assert [tag["name"] for tag in client.get(f"{API}/tags").json["tags"]] == in_code_points
    hits = client.post(f"{API}/search", json={"query": "tags", "mode": "fts"}).json["results"]
    assert hits[0]["tags"] == in_code_points


def _named(response: Any, field: str) -> bool:
    """422 naming `field` twice: at the start of the message, for a person, and (3.16) as the error's `field`."""
    error = response.json["error"]
    return response.status_code == 422 and str(error["message"]).startswith(field) and error.get("field") == field


@pytest.mark.both_stores
def test_the_limits_the_contract_writes_down_are_enforced_at_their_edges(client: FlaskClient) -> None:
    """docs/engine-api.md, "Limits": each accepted at its edge, and one past it is 422 naming the field."""
    def note(**fields: Any) -> Any:
        return client.post(f"{API}/jobs", json={"text": "limits", **fields})

    edges: list[tuple[Callable[[int], Any], int, str]] = [
        (lambda n: note(tags=[f"t{i}" for i in range(n)]), 100, "tags"),
        (lambda n: note(tags=["x" * n]), 200, "tags"),
        (lambda n: note(title="x" * n), 1000, "title"),
        (lambda n: note(source_path="x" * n), 4096, "source_path"),
        (lambda n: note(changed_by="x" * n), 200, "changed_by"),
        (lambda n: client.post(f"{API}/jobs", json={"text": f"key {n}"}, headers={"Idempotency-Key": "k" * n}),
         255, "Idempotency-Key"),
        (lambda n: client.get(f"{API}/documents", query_string={"limit": n}), 500, "limit"),
        (lambda n: client.get(f"{API}/jobs", query_string={"limit": n}), 500, "limit"),
        (lambda n: client.post(f"{API}/search", json={"query": "x", "doc_type": "x" * n}), 50, "doc_type"),
        (lambda n: client.post(f"{API}/search", json={"query": "x" * n}), 4000, "query"),
        (lambda n: client.post(f"{API}/search", json={"query": "x", "top_n": n}), 100, "top_n"),
    ]
    for send, edge, field in edges:
        taken = send(edge)
        assert taken.status_code in (200, 202), (field, taken.json)
        assert _named(send(edge + 1), field), field
    # An Idempotency-Key holding NUL: taken on SQLite, a 500 on PostgreSQL (gunicorn refuses it before the app).
    assert _named(client.post(f"{API}/jobs", json={"text": "nul key"}, headers={"Idempotency-Key": "a\x00b"}),
                  "Idempotency-Key")
    assert _named(note(tags=["tab\there"]), "tags")  # no control characters in a tag
    assert _named(note(tags=["  "]), "tags")  # nor a blank one
    assert client.post(f"{API}/search", json={"query": "x", "top_n": 5.0}).status_code == 200
    assert _named(client.post(f"{API}/search", json={"query": "x", "top_n": True}), "top_n")
    related = add_note(client, "a chunk to relate")
    chunk = related["chunks"][0]["id"]
    old = {"version": 5.0, "title": "t", "text": "old", "tags": [], "updated_at": "2020-01-01"}
    refused = client.put(f"{API}/documents/{related['id']}/versions", json={"versions": [old]})
    assert _named(refused, "versions[0].version")
    assert _named(client.get(f"{API}/chunks/{chunk}/related", query_string={"top_n": 101}), "top_n")


@pytest.mark.both_stores
def test_an_idempotency_key_compares_the_documents_fields_not_priority_or_unique_in(client: FlaskClient) -> None:
    """"The same body" is what the document is made of; `priority` and `unique_in` are not compared, and a
    request that queued nothing (a duplicate under `unique_in`) keeps no key."""
    sent = {"text": "kept once", "tags": ["collection:a"]}
    first = client.post(f"{API}/jobs", json={**sent, "unique_in": "collection:a"}, headers={"Idempotency-Key": "same"})
    assert first.status_code == 202
    for other in ({"priority": "bulk"}, {}):  # another priority; no unique_in
        again = client.post(f"{API}/jobs", json={**sent, **other}, headers={"Idempotency-Key": "same"})
        assert again.status_code == 200 and again.json["id"] == first.json["id"], other
    changed = client.post(f"{API}/jobs", json={"text": "kept twice", "tags": ["collection:a"]},
                          headers={"Idempotency-Key": "same"})
    assert changed.status_code == 409 and changed.json["error"]["code"] == "conflict"
    wait_job(client, first.json["id"])
    body = {"text": "kept  once ", "tags": ["collection:a"], "unique_in": "collection:a"}
    duplicate = client.post(f"{API}/jobs", json=body, headers={"Idempotency-Key": "dup"})
    assert duplicate.status_code == 200 and duplicate.json["duplicate_of"] is not None
    reused = client.post(f"{API}/jobs", json={**body, "text": "something else"}, headers={"Idempotency-Key": "dup"})
    assert reused.status_code == 202  # the key was not kept: nothing was queued under it


@pytest.mark.both_stores
def test_versions_travel_as_etags_and_if_match_takes_their_forms(client: FlaskClient) -> None:
    document = add_note(client, "etags", tags=["collection:a"])
    path = f"{API}/documents/{document['id']}"
    assert client.get(path).headers["ETag"] == '"1"'
    assert "ETag" not in client.get(path, query_string={"version": 1}).headers
    moved = client.patch(path, json={"title": "moved"}, headers={"If-Match": 'W/"1"'})
    assert moved.status_code == 200 and moved.headers["ETag"] == '"2"'
    updated = client.patch(f"{API}/notes/{document['id']}", json={"text": "new"}, headers={"If-Match": '"9", 2'})
    assert updated.status_code == 200 and updated.headers["ETag"] == '"3"'
    tagged = client.patch(f"{path}/tags", json={"add": ["x"]}, headers={"If-Match": "*"})
    assert tagged.status_code == 200 and tagged.json["version"] == 4 and "ETag" not in tagged.headers
    refused = client.delete(path, headers={"If-Match": '"3"'})
    assert refused.status_code == 412 and refused.json["error"]["code"] == "precondition_failed"
    assert client.delete(path, headers={"If-Match": "*"}).status_code == 204
    assert client.delete(path, headers={"If-Match": "*"}).status_code == 404  # `*`: only a document that exists


@pytest.mark.both_stores
def test_removing_a_tag_the_document_does_not_carry_is_404(client: FlaskClient) -> None:
    document = add_note(client, "one tag", tags=["kept"])
    absent = client.delete(f"{API}/documents/{document['id']}/tags/gone")
    assert absent.status_code == 404 and absent.json["error"]["code"] == "not_found"
    assert "gone" in absent.json["error"]["message"]
    assert client.get(f"{API}/documents/{document['id']}").json["version"] == 1


@pytest.mark.both_stores
def test_a_dot_segment_tag_is_removed_when_its_dots_are_percent_encoded(client: FlaskClient) -> None:
    document = add_note(client, "dot tags", tags=["..", ".", "kept"])
    for encoded in ("%2E%2E", "%2e"):
        assert client.delete(f"{API}/documents/{document['id']}/tags/{encoded}").status_code == 200
    assert client.get(f"{API}/documents/{document['id']}").json["tags"] == ["kept"]


@pytest.mark.both_stores
def test_related_is_503_not_ready_while_the_model_loads(app: flask.Flask, client: FlaskClient) -> None:
    chunk = add_note(client, "a chunk before the model")["chunks"][0]["id"]
    gate = threading.Event()

    def loading() -> Embedder:
        gate.wait(60)
        raise RuntimeError("released by the test")

    engine_of(app).embedders.load(loading, background=True)
    try:
        answer = client.get(f"{API}/chunks/{chunk}/related")
        assert answer.status_code == 503 and answer.json["error"]["code"] == "not_ready"
    finally:
        gate.set()


@pytest.mark.both_stores
def test_status_says_what_the_contract_lists_as_the_local_engines_additions(client: FlaskClient) -> None:
    status = client.get(f"{API}/status").json
    assert set(status["queue"]) == {"queued", "running", "done", "failed", "cancelled"}
    assert set(status["embedder"]) == {"state", "reason"} and status["embedder"]["state"] == "disabled"
    assert isinstance(status["indexes"], dict) and status["store"] in ("sqlite", "postgresql")
    assert status["model"] is None and status["device"] == "cpu" and status["search_modes"] == ["fts"]


@pytest.mark.both_stores
def test_a_notes_derived_title_follows_its_text_and_a_given_one_stays(client: FlaskClient) -> None:
    """A note without a title is titled by its first line; a text update that leaves the title out derives
    it anew while it is still the derived one, and leaves a title of its own as it is."""
    derived = add_note(client, "\n## First line\nsecond")
    assert derived["title"] == "First line"
    assert add_note(client, "x" * 100)["title"] == "x" * 79 + "…"
    # Control characters are no part of a title (a title given to the bridge may hold none): each run is a space.
    assert add_note(client, "\x1b[31mHeron\x1b[0m\tred\x7f\x01wing\nsecond")["title"] == "[31mHeron [0m red wing"
    updated = client.patch(f"{API}/notes/{derived['id']}", json={"text": "Other line\nmore"}).json
    assert updated["title"] == "Other line"
    given = add_note(client, "Plain text\nbody", title="Mine")
    assert client.patch(f"{API}/notes/{given['id']}", json={"text": "New text"}).json["title"] == "Mine"


@pytest.mark.both_stores
def test_fields_a_request_does_not_know_are_ignored_except_by_a_documents_patch(client: FlaskClient) -> None:
    assert client.post(f"{API}/search", json={"query": "x", "newer_field": 1}).status_code == 200
    document = add_note(client, "unknown fields", later_field="ignored")
    patched = client.patch(f"{API}/notes/{document['id']}", json={"text": "known", "tags": ["not here"]})
    assert patched.status_code == 200 and patched.json["tags"] == []
    refused = client.patch(f"{API}/documents/{document['id']}", json={"title": "t", "tags": ["x"]})
    assert refused.status_code == 422 and "tags" in refused.json["error"]["message"]


@pytest.mark.both_stores
def test_hits_of_equal_score_come_in_chunk_id_order_on_every_store(client: FlaskClient) -> None:
    """Four notes that score alike for "fish": SQLite answered chunks 1, 3, 2, 4 and PostgreSQL 4, 1, 2, 3."""
    chunks = [add_note(client, f"{word} fish")["chunks"][0]["id"] for word in ("one", "two", "three", "four")]
    hits = client.post(f"{API}/search", json={"query": "fish", "mode": "fts"}).json["results"]
    assert len({hit["score"] for hit in hits}) == 1
    assert [hit["chunk_id"] for hit in hits] == sorted(chunks)


@pytest.mark.both_stores
def test_a_note_update_is_recorded_as_a_done_update_job(client: FlaskClient) -> None:
    document = add_note(client, "before", tags=["collection:a"])
    assert client.patch(f"{API}/notes/{document['id']}", json={"text": "after"}).status_code == 200
    job = client.get(f"{API}/jobs", query_string={"limit": 1}).json["jobs"][0]
    assert {key: job[key] for key in ("type", "status", "document_id", "priority", "tags")} == {
        "type": "update", "status": "done", "document_id": document["id"], "priority": "bulk", "tags": None}


def test_a_refusal_names_its_field_only_when_it_concerns_one(client: FlaskClient) -> None:
    """docs/engine-api.md, "Errors" (3.16): `field` names the one field refused, and is absent otherwise."""
    note = add_note(client, "a note to refuse changes to")
    neither = client.patch(f"{API}/notes/{note['id']}", json={})
    assert neither.status_code == 422 and "field" not in neither.json["error"], neither.json
    unknown = client.patch(f"{API}/documents/{note['id']}", json={"text": "not here"})
    assert unknown.status_code == 422 and unknown.json["error"]["field"] == "text", unknown.json
    times = client.post(f"{API}/jobs", json={"text": "t", "created_at": "2026-01-02", "updated_at": "2026-01-01"})
    assert times.status_code == 422 and times.json["error"]["field"] == "updated_at", times.json
    both = client.patch(f"{API}/documents/{note['id']}/tags", json={"add": ["x"], "remove": ["x"]})
    assert both.status_code == 422 and both.json["error"]["field"] == "remove", both.json


@pytest.mark.both_stores
def test_vector_hits_of_equal_score_come_in_chunk_id_order_on_every_store(vclient: FlaskClient) -> None:
    """Identical notes share one vector: SQLite's vector index answered them newest first (6, 5, 4, ...) where
    PostgreSQL answered 1, 2, 3, ..., in vector search and in related chunks alike."""
    chunks = [add_note(vclient, "Descaling the kettle with vinegar.", title="Kettle")["chunks"][0]["id"]
              for _ in range(5)]
    hits = vclient.post(f"{API}/search", json={"query": "kettle limescale", "mode": "vector"}).json["results"]
    assert len({hit["score"] for hit in hits}) == 1
    assert [hit["chunk_id"] for hit in hits] == sorted(chunks)
    related = vclient.get(f"{API}/chunks/{chunks[-1]}/related?top_n=10").json["results"]
    assert len({hit["score"] for hit in related}) == 1
    assert [hit["chunk_id"] for hit in related] == sorted(chunks[:-1])
