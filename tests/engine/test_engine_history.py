"""A note's history (GET /documents/{id}/versions, ?version=N, PUT versions, KB_ENGINE_KEEP_VERSIONS) and
notes unique in a scope (`unique_in`), on both stores (the both_stores marker, tests/engine/conftest.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import flask
import pytest
from flask.testing import FlaskClient

from kb_bridge.local_engine.app import engine_of
from kb_bridge.testing.engine_app import API, add_note, error_code, upload, wait_job

pytestmark = pytest.mark.both_stores


def _patch(client: FlaskClient, doc_id: int, **body: object) -> dict[str, object]:
    response = client.patch(f"{API}/notes/{doc_id}", json=body)
    assert response.status_code == 200, response.json
    return response.json


def test_every_text_or_title_change_keeps_the_version_it_replaces(client: FlaskClient) -> None:
    note = add_note(client, "the kettle is in the left cupboard", tags=["collection:memory"], changed_by="alice")
    assert note["changed_by"] == "alice"
    _patch(client, note["id"], text="the kettle is in the right cupboard", changed_by="bob")
    client.post(f"{API}/documents/{note['id']}/tags", json={"tags": ["kitchen"]})  # a version step, no text change
    current = _patch(client, note["id"], title="Kettle")

    listed = client.get(f"{API}/documents/{note['id']}/versions").json["versions"]
    assert [v["version"] for v in listed] == [current["version"], 3, 2, 1] and current["version"] == 4
    assert [v["current"] for v in listed] == [True, False, False, False]
    assert [v["changed_by"] for v in listed] == [None, "bob", "bob", "alice"]
    assert listed[1]["tags"] == ["collection:memory", "kitchen"] and listed[2]["tags"] == ["collection:memory"]
    assert "content" not in listed[1]

    first = client.get(f"{API}/documents/{note['id']}?version=1").json
    assert first["content"] == "the kettle is in the left cupboard" and first["version"] == 1
    assert first["chunks"] == [] and first["current"] is False
    now = client.get(f"{API}/documents/{note['id']}?version={current['version']}").json
    assert now["content"] == "the kettle is in the right cupboard" and now["title"] == "Kettle" and now["current"]
    missing = client.get(f"{API}/documents/{note['id']}?version=5")  # never made
    assert missing.status_code == 404 and error_code(missing) == "not_found"
    assert client.get(f"{API}/documents/{note['id']}?version=x").status_code == 422


def test_an_update_that_changes_nothing_makes_no_version(make_app: Callable[..., flask.Flask]) -> None:
    """A text and title equal to the note's are no change: each such PATCH made a version, so repeating an update
    (kb_update_note is idempotent) pushed the real earlier versions out of the kept ones and marked the note
    updated."""
    client = make_app(keep_versions=2).test_client()
    note = add_note(client, "the boiler is serviced in May", changed_by="alice")
    changed = _patch(client, note["id"], text="the boiler is serviced in June", changed_by="bob")
    for _ in range(3):
        again = _patch(client, note["id"], text="the boiler is serviced in June", changed_by="carol")
        assert (again["version"], again["updated_at"], again["changed_by"]) == (2, changed["updated_at"], "bob")
        assert "content" not in again and "chunks" not in again
    assert _patch(client, note["id"], title=changed["title"])["version"] == 2
    listed = client.get(f"{API}/documents/{note['id']}/versions").json["versions"]
    assert [v["version"] for v in listed] == [2, 1]
    first = client.get(f"{API}/documents/{note['id']}?version=1").json
    assert first["content"] == "the boiler is serviced in May"
    # A condition still holds to the version: a stale one is refused even when nothing would change.
    stale = client.patch(f"{API}/notes/{note['id']}", json={"text": "the boiler is serviced in June"},
                         headers={"If-Match": '"1"'})
    assert stale.status_code == 412
    # Whitespace is a change of the text (only the duplicate check normalises it).
    assert _patch(client, note["id"], text="the boiler is serviced in June ")["version"] == 3


@pytest.mark.parametrize("write", ["text", "move"])
def test_a_write_answers_the_version_it_made_not_one_made_after_it(
        app: flask.Flask, monkeypatch: pytest.MonkeyPatch, write: str) -> None:
    """Another writer's change landing between a write's commit and its answer (another replica, another
    thread) was answered as the write's own: the client took that version for its own and sent it as If-Match
    next, writing over a change it never saw. The hook lands a tag change just after the write commits."""
    client = app.test_client()
    note = add_note(client, "the gate code is 1234")
    indexes = engine_of(app).store.indexes
    catch_up = indexes.catch_up

    def another_writer_lands() -> None:
        monkeypatch.setattr(indexes, "catch_up", catch_up)
        catch_up()
        engine_of(app).store.add_tags(note["id"], ["landed-meanwhile"], "2026-11-28T00:00:00.000Z")

    monkeypatch.setattr(indexes, "catch_up", another_writer_lands)
    if write == "text":
        answer = client.patch(f"{API}/notes/{note['id']}", json={"text": "the gate code is 5678"})
    else:
        answer = client.patch(f"{API}/documents/{note['id']}", json={"source_path": "gate.md"})
    assert answer.status_code == 200, answer.json
    assert answer.json["version"] == 2 and "landed-meanwhile" not in answer.json["tags"]
    assert answer.headers.get("ETag") in (None, '"2"')
    now = client.get(f"{API}/documents/{note['id']}").json
    assert now["version"] == 3 and "landed-meanwhile" in now["tags"]
    # The answered version, sent back, finds the change made since.
    stale = client.patch(f"{API}/notes/{note['id']}", json={"text": "the gate code is 0000"}, headers={"If-Match": '"2"'})
    assert stale.status_code == 412


def test_a_note_moved_in_place_keeps_the_version_it_replaces(client: FlaskClient) -> None:
    note = add_note(client, "the spare key is under the blue pot", changed_by="alice")
    moved = client.patch(f"{API}/documents/{note['id']}", json={"source_path": "keys.md"}).json
    assert moved["changed_by"] == "alice"  # a source_path alone is no new text or title: still alice's
    assert [v["version"] for v in client.get(f"{API}/documents/{note['id']}/versions").json["versions"]] == [2, 1]
    retitled = client.patch(f"{API}/documents/{note['id']}", json={"title": "Spare key"}).json
    assert retitled["title"] == "Spare key" and retitled["changed_by"] is None  # a move names no one
    listed = client.get(f"{API}/documents/{note['id']}/versions").json["versions"]
    assert [(v["version"], v["title"], v["changed_by"]) for v in listed] == [
        (3, "Spare key", None), (2, note["title"], "alice"), (1, note["title"], "alice")]
    kept = client.get(f"{API}/documents/{note['id']}?version=2").json
    assert kept["content"] == "the spare key is under the blue pot" and kept["title"] == note["title"]


def test_every_version_number_given_out_stays_readable(client: FlaskClient) -> None:
    """A tag change or a move between collections raised a note's version without keeping the one it
    replaced: the number its writer had just been given (which If-Match and the console's history pages use)
    answered 404, and the history skipped it."""
    first, second = "the boiler manual is in the hall drawer", "the boiler manual is in the kitchen drawer"
    note = add_note(client, first, tags=["collection:memory"], changed_by="alice")
    tags_url = f"{API}/documents/{note['id']}/tags"
    assert _patch(client, note["id"], text=second, changed_by="bob")["version"] == 2
    assert client.patch(tags_url, json={"add": ["boiler"]}).json["version"] == 3
    moved = client.patch(tags_url, json={"add": ["collection:house"], "remove": ["collection:memory"]}).json
    assert moved["version"] == 4
    assert client.post(tags_url, json={"tags": ["boiler"]}).json["version"] == 4  # no change, no version

    made = {1: (first, ["collection:memory"], "alice"), 2: (second, ["collection:memory"], "bob"),
            3: (second, ["boiler", "collection:memory"], "bob"), 4: (second, ["boiler", "collection:house"], "bob")}
    listed = client.get(f"{API}/documents/{note['id']}/versions").json["versions"]
    assert [(v["version"], v["tags"], v["changed_by"]) for v in listed] == [
        (number, tags, who) for number, (_text, tags, who) in sorted(made.items(), reverse=True)]
    for number, (text, tags, who) in made.items():
        got = client.get(f"{API}/documents/{note['id']}?version={number}")
        assert got.status_code == 200, (number, got.json)
        assert (got.json["version"], got.json["content"], got.json["tags"], got.json["changed_by"]) == (
            number, text, tags, who)


def test_a_files_tag_change_keeps_no_version(client: FlaskClient) -> None:
    file_id = wait_job(client, upload(client, "boiler.txt", b"service every autumn").json["id"])["document_id"]
    assert client.post(f"{API}/documents/{file_id}/tags", json={"tags": ["boiler"]}).json["version"] == 2
    assert [v["version"] for v in client.get(f"{API}/documents/{file_id}/versions").json["versions"]] == [2]
    assert client.get(f"{API}/documents/{file_id}?version=1").status_code == 404  # only notes have versions


def test_search_finds_only_the_current_version(client: FlaskClient) -> None:
    note = add_note(client, "the meeting room is called aardvark")
    _patch(client, note["id"], text="the meeting room is called platypus")
    assert client.post(f"{API}/search", json={"query": "aardvark", "mode": "fts"}).json["results"] == []
    hits = client.post(f"{API}/search", json={"query": "platypus", "mode": "fts"}).json["results"]
    assert [hit["document_id"] for hit in hits] == [note["id"]]


def test_keep_versions_prunes_the_oldest(make_app: Callable[..., flask.Flask]) -> None:
    client = make_app(keep_versions=2).test_client()
    note = add_note(client, "version one")
    for n in ("two", "three", "four"):
        _patch(client, note["id"], text=f"version {n}")
    listed = client.get(f"{API}/documents/{note['id']}/versions").json["versions"]
    assert [v["version"] for v in listed] == [4, 3, 2]
    assert client.get(f"{API}/documents/{note['id']}?version=1").status_code == 404
    assert client.get(f"{API}/documents/{note['id']}?version=2").json["content"] == "version two"


def test_deleting_a_document_deletes_its_history(client: FlaskClient, app: flask.Flask) -> None:
    from .test_engine_documents import _count

    note = add_note(client, "short lived")
    _patch(client, note["id"], text="short lived, edited")
    assert _count(app, "SELECT COUNT(*) FROM document_versions WHERE document_id = ?", (note["id"],)) == 1
    assert client.delete(f"{API}/documents/{note['id']}").status_code == 204
    assert client.get(f"{API}/documents/{note['id']}/versions").status_code == 404
    assert _count(app, "SELECT COUNT(*) FROM document_versions WHERE document_id = ?", (note["id"],)) == 0


def test_restored_versions_keep_their_numbers_below_the_current_one(client: FlaskClient) -> None:
    note = add_note(client, "imported text, now")
    versions = [{"version": 2, "title": "Old", "text": "imported text, before", "tags": ["collection:memory"],
                 "updated_at": "2026-01-02T00:00:00Z", "changed_by": "carol"},
                {"version": 1, "title": "Older", "text": "imported text, first", "tags": [],
                 "updated_at": "2026-01-01T00:00:00Z"}]
    answer = client.put(f"{API}/documents/{note['id']}/versions", json={"versions": versions}).json
    assert [v["version"] for v in answer["versions"]] == [3, 2, 1]
    assert client.get(f"{API}/documents/{note['id']}?version=2").json["changed_by"] == "carol"
    bad = client.put(f"{API}/documents/{note['id']}/versions", json={"versions": [{"version": 1, "text": "x"}]})
    assert bad.status_code == 422 and "versions[0].title" in bad.json["error"]["message"]


@pytest.mark.parametrize("updated_at", ["yesterday", "2026-02-30", 20260101, None])
def test_a_restored_versions_updated_at_must_be_a_timestamp(client: FlaskClient, updated_at: object) -> None:
    """Any string was stored and served as the version's updated_at ("yesterday")."""
    note = add_note(client, "imported text, now")
    good = {"version": 1, "title": "Old", "text": "imported text, before", "tags": [],
            "updated_at": "2026-01-01T01:00:00+01:00"}
    bad = client.put(f"{API}/documents/{note['id']}/versions",
                     json={"versions": [good, {**good, "version": 2, "updated_at": updated_at}]})
    assert bad.status_code == 422 and error_code(bad) == "validation_error", bad.json
    assert bad.json["error"]["message"].startswith("versions[1].updated_at"), bad.json
    assert client.put(f"{API}/documents/{note['id']}/versions", json={"versions": [good]}).status_code == 200
    kept = client.get(f"{API}/documents/{note['id']}/versions").json["versions"]
    assert kept[1]["updated_at"] == "2026-01-01T00:00:00.000Z"  # normalised like every stored time


def _post(client: FlaskClient, text: str, scope: str = "collection:memory") -> flask.Response:
    return client.post(f"{API}/jobs", json={"text": text, "tags": [scope], "unique_in": scope})


def test_a_note_unique_in_a_scope_is_not_added_twice(client: FlaskClient) -> None:
    first = _post(client, "Café  opens\tat 9")
    assert first.status_code == 202
    document_id = wait_job(client, first.json["id"])["document_id"]
    # The same text after NFC, trimming and collapsing whitespace: the earlier note's job, no new one.
    again = _post(client, "  Cafe\u0301 opens at 9\n")
    assert again.status_code == 200 and again.json["duplicate_of"] == document_id
    assert again.json["id"] == first.json["id"]
    assert _post(client, "Café opens at 9", scope="collection:other").status_code == 202  # another scope
    assert _post(client, "Café opens at 10").status_code == 202  # another text
    missing = client.post(f"{API}/jobs", json={"text": "x", "tags": [], "unique_in": "collection:memory"})
    assert missing.status_code == 422 and "unique_in" in missing.json["error"]["message"]


def test_a_changed_or_moved_note_is_found_by_its_new_text_and_scope(client: FlaskClient) -> None:
    note_id = wait_job(client, _post(client, "blue").json["id"])["document_id"]
    _patch(client, note_id, text="green")
    assert _post(client, "blue").status_code == 202  # the old text is free again
    assert _post(client, "green").json["duplicate_of"] == note_id
    client.patch(f"{API}/documents/{note_id}/tags", json={"add": ["collection:b"], "remove": ["collection:memory"]})
    assert _post(client, "green", scope="collection:b").json["duplicate_of"] == note_id
    assert _post(client, "green").status_code == 202
    client.delete(f"{API}/documents/{note_id}")
    assert _post(client, "green", scope="collection:b").status_code == 202


def test_identical_notes_queued_at_once_make_one_job(app: flask.Flask) -> None:
    answers: list[flask.Response] = []
    start = threading.Barrier(8)

    def add() -> None:
        client = app.test_client()
        start.wait()
        answers.append(_post(client, "the same note, sent eight times at once"))

    threads = [threading.Thread(target=add) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answer.status_code for answer in answers) == [200] * 7 + [202]
    assert len({answer.json["id"] for answer in answers}) == 1


def test_racing_text_and_title_updates_never_undo_each_other(vector_app: flask.Flask) -> None:
    """A PATCH that leaves a field out keeps that field as it is when the update is written, not as it was
    when the update began (before its embedding): a title-only update never writes back an older text, a
    text-only update never an older title. Two threads race (the real model makes each update slow), then
    every kept version is checked against the one before it."""
    client = vector_app.test_client()
    note = add_note(client, "text 0: the heron stands in the pond", title="title 0")
    rounds = 12
    answers: list[int] = []
    start = threading.Barrier(2)

    def update(field: str) -> None:
        own = vector_app.test_client()
        start.wait(10)
        for n in range(1, rounds + 1):
            value = f"{field} {n}: the heron stands in the pond" if field == "text" else f"{field} {n}"
            response = own.patch(f"{API}/notes/{note['id']}", json={field: value, "changed_by": f"{field} {n}"})
            answers.append(response.status_code)

    threads = [threading.Thread(target=update, args=(field,)) for field in ("text", "title")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)
    assert set(answers) == {200} and len(answers) == 2 * rounds

    listed = client.get(f"{API}/documents/{note['id']}/versions").json["versions"]
    assert [v["version"] for v in listed] == list(range(2 * rounds + 1, 0, -1))
    kept = {v["version"]: client.get(f"{API}/documents/{note['id']}?version={v['version']}").json for v in listed}
    for number in range(2, 2 * rounds + 2):
        made, before = kept[number], kept[number - 1]
        if made["changed_by"].startswith("title"):
            assert made["content"] == before["content"], (number, made["changed_by"])
            assert made["title"] == made["changed_by"]
        else:
            assert made["title"] == before["title"], (number, made["changed_by"])
            assert made["content"].startswith(made["changed_by"])


@pytest.mark.parametrize("version", ["²", "٣", "1" * 5000, "+1", " 1", "0"])
def test_a_version_that_is_not_ascii_digits_is_422_naming_it(client: FlaskClient, version: str) -> None:
    """str.isdigit takes "²" (which int() refuses: a 500) and "٣" (Arabic-Indic three); 5000 digits are past
    int()'s limit. Only a positive number in ASCII digits names a version."""
    note = add_note(client, "the ladder is in the shed")
    response = client.get(f"{API}/documents/{note['id']}", query_string={"version": version})
    assert response.status_code == 422 and error_code(response) == "validation_error", response.json
    assert response.json["error"]["message"].startswith("version")
