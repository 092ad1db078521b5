"""Engine 3.8 times: documents filtered by created_at / updated_at in listings and in every search mode
(before the cut to top_n), and the times an imported document keeps (POST /jobs created_at, updated_at)."""

from __future__ import annotations

from typing import Any

import flask
import pytest
from flask.testing import FlaskClient

from kb_bridge.local_engine.app import engine_of
from kb_bridge.testing.engine_app import API, add_note, error_code, upload, wait_for, wait_job

# The engine API suite: every test here runs once per store (tests/engine/conftest.py).
pytestmark = pytest.mark.both_stores

OLD = "2020-03-01T10:00:00.000Z"
OLD_EDIT = "2021-06-01T09:30:00.000Z"


def listed(client: FlaskClient, **params: Any) -> list[int]:
    response = client.get(f"{API}/documents", query_string=params)
    assert response.status_code == 200, response.json
    return [d["id"] for d in response.json["documents"]]


def search(client: FlaskClient, **body: Any) -> dict[str, Any]:
    response = client.post(f"{API}/search", json=body)
    assert response.status_code == 200, response.json
    return dict(response.json)


def test_a_note_and_a_file_keep_the_times_they_are_given(client: FlaskClient) -> None:
    note = add_note(client, "A note written long ago.", created_at="2020-03-01T11:00:00+01:00", updated_at=OLD_EDIT)
    assert (note["created_at"], note["updated_at"]) == (OLD, OLD_EDIT)  # normalised to UTC with milliseconds
    only_created = add_note(client, "Another old note.", created_at="2020-03-01")
    assert only_created["created_at"] == only_created["updated_at"] == "2020-03-01T00:00:00.000Z"
    response = upload(client, "old.md", b"# Old file\n\nKept with its times.", created_at=OLD, updated_at=OLD_EDIT)
    assert response.status_code == 202, response.json
    job = wait_job(client, response.json["id"])
    document = client.get(f"{API}/documents/{job['document_id']}").json
    assert (document["created_at"], document["updated_at"]) == (OLD, OLD_EDIT)
    assert job["created_at"] > OLD_EDIT  # the job's own time is now
    fresh = add_note(client, "A note of today.")
    assert fresh["created_at"] > "2025" and fresh["created_at"] == fresh["updated_at"]


@pytest.mark.parametrize(("fields", "named"), [
    ({"created_at": "yesterday"}, "created_at"),
    ({"updated_at": OLD}, "updated_at"),  # without created_at
    ({"created_at": OLD_EDIT, "updated_at": OLD}, "updated_at"),  # earlier than created_at
    ({"created_at": 20200301}, "created_at"),
    ({"created_at": "2020-02-30"}, "created_at"),
])
def test_wrong_document_times_are_422_naming_the_field(client: FlaskClient, fields: dict[str, Any], named: str) -> None:
    response = client.post(f"{API}/jobs", json={"text": "x", **fields})
    assert response.status_code == 422 and error_code(response) == "validation_error"
    assert response.json["error"]["message"].startswith(named), response.json
    if not all(isinstance(value, str) for value in fields.values()):
        return  # a form field is always text ("20200301" is ISO 8601's basic form of a date)
    form = upload(client, "x.md", b"x", **fields)
    assert form.status_code == 422 and form.json["error"]["message"].startswith(named), form.json


def _placed(client: FlaskClient) -> dict[str, dict[str, Any]]:
    """Three documents at known times: a (created and updated 2020), b (created 2020, updated 2022),
    c (created and updated 2023)."""
    return {
        "a": add_note(client, "Kingfishers perch above streams.", created_at="2020-01-01T00:00:00Z"),
        "b": add_note(client, "Kingfishers dive for small fish.", created_at="2020-06-01T00:00:00Z",
                      updated_at="2022-01-01T00:00:00Z"),
        "c": add_note(client, "Kingfishers nest in river banks.", created_at="2023-01-01T00:00:00Z"),
    }


def test_listings_filter_by_created_and_updated_after_inclusive_before_exclusive(client: FlaskClient) -> None:
    docs = _placed(client)
    a, b, c = (docs[k]["id"] for k in "abc")
    assert listed(client, created_after="2020-06-01T00:00:00Z") == [c, b]  # inclusive
    assert listed(client, created_before="2020-06-01T00:00:00Z") == [a]  # exclusive
    assert listed(client, created_after="2020-01-01", created_before="2023-01-01") == [b, a]
    assert listed(client, updated_after="2021-01-01") == [c, b]
    assert listed(client, updated_before="2022-01-01T00:00:00.001Z") == [b, a]
    assert listed(client, updated_after="2021-01-01", created_before="2021-01-01") == [b]
    # updated_since, the older name, narrows updated_after further when both are given.
    assert listed(client, updated_since="2022-06-01", updated_after="2021-01-01") == [c]
    answer = client.get(f"{API}/documents", query_string={"created_after": "2020-06-01T02:00:00+02:00"}).json
    assert answer["time_filters"]["created_after"] == "2020-06-01T00:00:00.000Z" and answer["total"] == 2


def test_a_bound_finer_than_a_millisecond_keeps_after_inclusive_and_before_exclusive(client: FlaskClient) -> None:
    """Stored times are whole milliseconds; a bound between two of them was cut to the earlier one, so a
    document made at .000 was dropped by `created_before=.0005` (it was made before) and kept by
    `created_after=.0005` (it was not made after), in listings and in search alike."""
    made = add_note(client, "A heron at the exact second.", created_at="2020-06-01T00:00:00.000Z")["id"]
    for bounds, found in (({"created_before": "2020-06-01T00:00:00.0005Z"}, [made]),
                          ({"created_after": "2020-06-01T00:00:00.0005Z"}, []),
                          ({"updated_since": "2020-06-01T00:00:00.000001Z"}, []),
                          ({"created_after": "2020-06-01T00:00:00.000Z",
                            "created_before": "2020-06-01T00:00:00.000001Z"}, [made])):
        assert listed(client, **bounds) == found, bounds
        if "updated_since" not in bounds:
            hits = search(client, query="heron", mode="fts", **bounds)["results"]
            assert [hit["document_id"] for hit in hits] == found, bounds
    answer = client.get(f"{API}/documents", query_string={"created_before": "2020-06-01T00:00:00.0005Z"}).json
    assert answer["time_filters"]["created_before"] == "2020-06-01T00:00:00.001Z"  # the bound applied
    last = client.get(f"{API}/documents", query_string={"created_before": "9999-12-31T23:59:59.9995Z"})
    assert last.status_code == 200 and last.json["documents"] != []  # no later millisecond: kept as it is


@pytest.mark.parametrize(("params", "named"), [
    ({"created_after": "last week"}, "created_after"),
    ({"updated_before": "2020-13-01"}, "updated_before"),
    ({"created_after": "2021-01-01", "created_before": "2020-01-01"}, "created_after"),
    ({"updated_after": "2021-01-01", "updated_before": "2020-01-01"}, "updated_after"),
])
def test_wrong_bounds_are_422_naming_the_field(client: FlaskClient, params: dict[str, str], named: str) -> None:
    for response in (client.get(f"{API}/documents", query_string=params),
                     client.post(f"{API}/search", json={"query": "x", **params})):
        assert response.status_code == 422 and error_code(response) == "validation_error"
        assert response.json["error"]["message"].startswith(named), response.json
    response = client.post(f"{API}/search", json={"query": "x", "created_after": 2020})
    assert response.status_code == 422 and response.json["error"]["message"].startswith("created_after")


def _crowded(client: FlaskClient) -> list[int]:
    """Twelve recent notes that match "heron" strongly, and two from 2019 that match it weakly: a search
    that cut to its top hits before filtering by time would find none of the old ones."""
    for n in range(12):
        add_note(client, f"Heron heron herons: grey heron number {n} stands in the heron pond.", title=f"Heron {n}")
    return [add_note(client, f"Among waders at the lake a heron was seen once, log {n}.", title=f"Old log {n}",
                     created_at=f"2019-0{n + 1}-01T00:00:00Z")["id"] for n in range(2)]


def test_fts_filters_by_time_before_the_cut(client: FlaskClient) -> None:
    old = _crowded(client)
    found = search(client, query="heron", mode="fts", top_n=2, created_before="2020-01-01")
    assert sorted(hit["document_id"] for hit in found["results"]) == sorted(old)
    assert all(hit["created_at"] < "2020" and hit["updated_at"] for hit in found["results"])
    assert found["time_filters"] == {"created_after": None, "created_before": "2020-01-01T00:00:00.000Z",
                                     "updated_after": None, "updated_before": None}
    assert len(search(client, query="heron", mode="fts", top_n=20, updated_after="2020-01-01")["results"]) == 12


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_vector_and_hybrid_filter_by_time_before_the_cut(vclient: FlaskClient, mode: str) -> None:
    old = _crowded(vclient)
    found = search(vclient, query="a heron by the water", mode=mode, top_n=2, updated_before="2020-01-01")
    assert found["mode"] == mode and sorted(hit["document_id"] for hit in found["results"]) == sorted(old)
    only_first = search(vclient, query="a heron by the water", mode=mode, top_n=5, created_after="2019-01-01",
                        created_before="2019-02-01")
    assert [hit["document_id"] for hit in only_first["results"]] == [old[0]]


@pytest.mark.parametrize("mode", ["fts", "hybrid"])
def test_the_text_index_applies_time_bounds_itself_without_asking_the_database(
        vector_app: flask.Flask, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """Time bounds are ranges over the text index's own columns (store/text_index.py, TIME_FIELDS): the
    database is not asked which documents a bound allows (that list grows with the store and cost 28-34 ms
    per count at 100k chunks)."""
    vclient = vector_app.test_client()
    old = _crowded(vclient)
    store = engine_of(vector_app).store
    asked: list[object] = []
    monkeypatch.setattr(store.sql_documents, "matching_document_ids",  # type: ignore[attr-defined]
                        lambda conn, where: asked.append(where) or [])
    found = search(vclient, query="heron at the lake", mode=mode, top_n=2, created_before="2020-01-01")
    assert sorted(hit["document_id"] for hit in found["results"]) == sorted(old)
    assert asked == []


@pytest.mark.parametrize("mode", ["fts", "hybrid"])
def test_a_change_of_a_documents_times_alone_reaches_the_text_index(client: FlaskClient, mode: str) -> None:
    """Moving a document changes its updated_at and neither its chunks nor its tags; the index's copy of the
    time follows anyway (the change log's trigger on the documents' times)."""
    def found(**bounds: str) -> list[int]:
        return [h["document_id"] for h in search(client, query="bittern", mode=mode, **bounds)["results"]]

    note = add_note(client, "A bittern boomed in the reeds at dusk.", created_at=OLD, updated_at=OLD_EDIT)
    assert found(updated_before="2022-01-01") == [note["id"]]
    moved = client.patch(f"{API}/documents/{note['id']}", json={"source_path": "birds/bittern.md"})
    assert moved.status_code == 200, moved.json
    assert moved.json["updated_at"] > "2025"
    wait_for(lambda: found(updated_after="2025-01-01") == [note["id"]], "the move's updated_at in the index")
    assert found(updated_before="2022-01-01") == []
    assert found(created_before="2021-01-01") == [note["id"]]  # created_at did not move


def test_a_year_before_1000_is_kept_in_four_digits_filtered_and_survives_a_restart(
        make_app: Any) -> None:
    """clock.format_iso wrote such a year with strftime("%Y"), unpadded on Linux ("999-06-01T…"): the
    text index could not read it back, so its catch-up stopped at that note for ever (later jobs failed),
    the time bounds compared the wrong text, and the engine did not start again."""
    client = make_app().test_client()
    ancient = add_note(client, "A charter sealed by the abbot.", created_at="0999-06-01")
    assert ancient["created_at"] == ancient["updated_at"] == "0999-06-01T00:00:00.000Z"
    later = add_note(client, "A charter sealed by the bishop.", created_at="1999-06-01")
    assert listed(client, created_after="0999-01-01") == [later["id"], ancient["id"]]
    assert listed(client, created_after="0999-01-01", created_before="1000-01-01") == [ancient["id"]]
    for mode in ("fts", "hybrid"):
        found = search(client, query="charter", mode=mode, created_after="0999-01-01", created_before="1000-01-01")
        assert [hit["document_id"] for hit in found["results"]] == [ancient["id"]]
        assert found["time_filters"]["created_before"] == "1000-01-01T00:00:00.000Z"
    engine_of(client.application).close()  # the first engine stops; a second opens the same data
    restarted = make_app().test_client()
    found = search(restarted, query="charter", mode="fts")
    assert sorted(hit["document_id"] for hit in found["results"]) == sorted([ancient["id"], later["id"]])


def test_a_stored_time_the_index_cannot_read_neither_stops_later_jobs_nor_the_next_start(make_app: Any) -> None:
    """An engine before the fix above stored year 999 as "999-06-01T…"; such a row must not stop the text
    index's catch-up (later jobs failed) nor its opening (the engine did not start). The chunk is indexed
    without its times: found by search, left out by every time bound."""
    app = make_app()
    client = app.test_client()
    legacy = add_note(client, "A charter copied by an older engine.")
    with engine_of(app).store.db.write() as conn:  # type: ignore[attr-defined]
        conn.execute(f"UPDATE documents SET created_at = '999-06-01T00:00:00.000Z' WHERE id = {legacy['id']}")
    after = add_note(client, "A charter copied today.")  # its job's catch-up reads the legacy row first
    engine_of(app).close()
    restarted = make_app().test_client()
    found = search(restarted, query="charter", mode="fts")
    assert sorted(hit["document_id"] for hit in found["results"]) == sorted([legacy["id"], after["id"]])
    bounded = search(restarted, query="charter", mode="fts", created_after="0001-01-01")
    assert [hit["document_id"] for hit in bounded["results"]] == [after["id"]]


def test_times_an_older_engine_wrote_with_a_short_year_are_repaired_at_the_next_start(
        make_app: Any, store: str) -> None:
    """The schema migration after the fix rewrites "999-06-01T…" (documents' times and kept versions') in four
    digits: served, sorted and filtered like any other time, in listings and in the text index."""
    from kb_bridge.local_engine.store.postgres import schema as postgres_schema
    from kb_bridge.local_engine.store.sqlite import schema as sqlite_schema

    app = make_app()
    client = app.test_client()
    ancient = add_note(client, "A charter sealed by the abbot.", created_at="0999-06-01")
    assert client.patch(f"{API}/notes/{ancient['id']}", json={"title": "Charter"}).status_code == 200
    recent = add_note(client, "A charter sealed by the mayor.", created_at="2001-01-01")
    with engine_of(app).store.db.write() as conn:  # type: ignore[attr-defined]
        # As an engine before the fix left them, at the schema version before the repair.
        conn.execute("UPDATE documents SET created_at = '999-06-01T00:00:00.000Z' "
                     f"WHERE id = {ancient['id']}")
        conn.execute("UPDATE document_versions SET updated_at = '999-06-01T00:00:00.000Z'")
        schema = sqlite_schema if store == "sqlite" else postgres_schema
        repair = next(m.version for m in schema.MIGRATIONS if m.description.startswith("times before year 1000"))
        # The migrations after the repair run again too: what they add is taken away, as before them.
        assert schema.LATEST_VERSION == repair + 2, "undo here what the migrations after the repair add"
        conn.execute("ALTER TABLE jobs DROP COLUMN resumes")
        conn.execute("ALTER TABLE jobs DROP COLUMN working")
        if store == "sqlite":
            conn.execute(f"PRAGMA user_version = {repair - 1}")
        else:
            conn.execute(f"UPDATE kb_schema SET version = {repair - 1}")
    engine_of(app).close()

    restarted = make_app().test_client()
    repaired = restarted.get(f"{API}/documents/{ancient['id']}?version=1").json
    assert (repaired["created_at"], repaired["updated_at"]) == ("0999-06-01T00:00:00.000Z",) * 2
    assert listed(restarted, created_before="1000-01-01") == [ancient["id"]]
    assert listed(restarted, created_after="1000-01-01") == [recent["id"]]
    found = search(restarted, query="charter", mode="fts", created_before="1000-01-01")
    assert [hit["document_id"] for hit in found["results"]] == [ancient["id"]]
