"""Export and import records (kb_bridge/cli/transfer.py, import_records.py) against a faked engine: the record's
fields, a file stored before the engine kept originals travelling as its text, and the key import derives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import responses

from kb_bridge.cli.import_records import check_record
from kb_bridge.cli.transfer import _records
from kb_bridge.client.engine import EngineClient
from kb_bridge.errors import InvalidArgument
from kb_bridge.settings import EngineSettings

URL = "http://engine.test"
DOC = {"id": 7, "title": "old.pdf", "doc_type": "pdf", "source_path": "reports/old.pdf", "tags": ["collection:documents", "q3"],
       "version": 2, "sha256": "ab" * 32, "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-02T00:00:00Z",
       "content": "Quarterly figures.", "chunks": []}


@responses.activate
def test_a_file_without_its_original_is_exported_with_its_text_and_imported_as_a_note() -> None:
    responses.get(f"{URL}/api/v1/documents", json={"documents": [DOC], "total": 1})
    responses.get(f"{URL}/api/v1/documents/7", json=DOC)
    responses.get(f"{URL}/api/v1/documents/7/original", status=404, json={"error": {"code": "not_found", "message": "x"}})
    client = EngineClient(EngineSettings(url=URL, retry_attempts=1))
    [record] = list(_records(client, None))
    assert record["collection"] == "documents" and record["tags"] == ["q3"] and record["version"] == 2
    assert record["filename"] == "old.pdf" and record["original_base64"] is None and record["text"] == "Quarterly figures."
    checked = check_record(json.loads(json.dumps(record)))
    assert checked.is_note and checked.text == "Quarterly figures."


def test_records_are_checked_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="collection"):
        check_record({"doc_type": "note", "text": "x", "collection": "Bad Name"})
    with pytest.raises(InvalidArgument, match="original_base64"):
        check_record({"doc_type": "pdf", "original_base64": "!!!", "filename": "a.pdf"})
    with pytest.raises(InvalidArgument, match="reserved"):
        check_record({"doc_type": "note", "text": "x", "tags": ["collection:other"]})


def test_fields_of_the_wrong_type_are_named() -> None:
    with pytest.raises(InvalidArgument, match="^collection: must be a string, not a number"):
        check_record({"doc_type": "note", "text": "x", "collection": 7})
    with pytest.raises(InvalidArgument, match="^original_base64: must be a string"):
        check_record({"doc_type": "pdf", "original_base64": 12345, "filename": "a.pdf"})
    with pytest.raises(InvalidArgument, match="^tags: must be a list of strings"):
        check_record({"doc_type": "note", "text": "x", "tags": 0})
    with pytest.raises(InvalidArgument, match="^title: is not valid Unicode"):
        check_record({"doc_type": "note", "text": "x", "title": "\ud800"})


def test_the_key_is_the_records_own() -> None:
    record = {"id": 3, "collection": "documents", "doc_type": "note", "text": "Curlews call at dusk.", "tags": []}
    key = check_record(dict(record)).key
    assert key == check_record(json.loads(json.dumps(record, indent=1))).key  # the same record, written otherwise
    assert key != check_record({**record, "id": 4}).key  # another document with the same text
    assert key != check_record({**record, "title": "Curlews"}).key
    assert len(key) <= 255 and key.startswith("kb-import-")


def test_times_are_checked_naming_the_field() -> None:
    with pytest.raises(InvalidArgument, match="^created_at: is not an ISO-8601 timestamp"):
        check_record({"doc_type": "note", "text": "x", "created_at": "last spring"})
    with pytest.raises(InvalidArgument, match="^updated_at: must be a string"):
        check_record({"doc_type": "note", "text": "x", "updated_at": 20260101})
    kept = check_record({"doc_type": "note", "text": "x", "created_at": "2021-01-01T08:00:00.000Z",
                         "updated_at": "2022-02-02T09:00:00Z"})
    assert (kept.created_at, kept.updated_at) == ("2021-01-01T08:00:00.000Z", "2022-02-02T09:00:00Z")


def test_an_older_engines_unpadded_year_is_imported_in_four_digits() -> None:
    """An engine before SQLite schema 10 (PostgreSQL 8), up to 2026-11-26, answered a year before 1000 as
    "999-06-01T…", so its export holds that form; the record imports with the year padded, as that schema
    repairs such times in place, instead of being refused as not ISO-8601."""
    kept = check_record({"doc_type": "note", "text": "x", "created_at": "999-06-01T00:00:00.000Z",
                         "updated_at": "999-06-02T00:00:00.000Z",
                         "history": [{"version": 1, "title": "x", "text": "w", "tags": [],
                                      "updated_at": "45-01-01T00:00:00.000Z"}]})
    assert (kept.created_at, kept.updated_at) == ("0999-06-01T00:00:00.000Z", "0999-06-02T00:00:00.000Z")
    assert kept.history[0]["updated_at"] == "0045-01-01T00:00:00.000Z"
    with pytest.raises(InvalidArgument, match="^created_at: is not an ISO-8601 timestamp"):
        check_record({"doc_type": "note", "text": "x", "created_at": "99999-01-01T00:00:00Z"})


def test_a_record_is_the_same_document_by_source_path_or_else_by_title_and_text() -> None:
    def identity(**fields: object) -> tuple[str | None, ...]:
        return check_record({"doc_type": "note", "text": "Same text.", "collection": "memory", **fields}).identity

    assert identity(title="preferences") != identity(title="habits")  # the same text under two titles
    assert identity(title="preferences") != identity(title="preferences", collection="documents")
    assert identity(title="preferences") == identity(title="preferences", id=99)
    assert identity(title="a", source_path="notes/a.md") != identity(title="a", source_path="notes/b.md")
    assert identity(title="a", source_path="notes/a.md") == identity(title="b", source_path="notes/a.md", text="other")


def fake_listing(documents: list[dict[str, object]], keyed: bool = True) -> list[dict[str, str]]:
    """GET /documents over `documents` as an engine lists them: newest update first (ties: the higher id
    first), time bounds (3.8), and with `keyed` the page after a key (3.14's `after`). Returns the queries."""
    from urllib.parse import parse_qs, urlparse

    queries: list[dict[str, str]] = []

    def answer(request: object) -> tuple[int, dict[str, str], str]:
        query = {k: v[0] for k, v in parse_qs(urlparse(request.url).query).items()}  # type: ignore[attr-defined]
        queries.append(query)
        found = sorted(documents, key=lambda d: (str(d["updated_at"]), int(d["id"])), reverse=True)  # type: ignore[call-overload]
        found = [d for d in found if str(d["updated_at"]) >= query.get("updated_after", "")]
        body: dict[str, object] = {"time_filters": {}}
        if keyed:
            body["after"] = query.get("after")
            if "after" in query:
                time, ident = query["after"].split(",")
                found = [d for d in found if (str(d["updated_at"]), int(d["id"])) < (time, int(ident))]  # type: ignore[call-overload]
        offset, limit = int(query.get("offset", 0)), int(query["limit"])
        body.update(documents=found[offset:offset + limit], total=len(found))
        return 200, {}, json.dumps(body)

    responses.add_callback(responses.GET, f"{URL}/api/v1/documents", callback=answer)
    return queries


@pytest.mark.parametrize("keyed", [True, False], ids=["engine 3.14", "engine before 3.14"])
@responses.activate
def test_a_listing_lists_each_document_once_across_instants_shared_by_more_than_a_page(keyed: bool) -> None:
    """250 documents updated in one millisecond (a batch of jobs finishes in one commit), between others:
    after the keys (3.14), or by offset from an engine that answers no `after`."""
    from kb_bridge.cli.listing import Listing

    def at(moment: str, ids: range) -> list[dict[str, object]]:
        return [{"id": i, "updated_at": moment, "tags": []} for i in ids]

    documents = (at("2026-01-01T00:00:00.000Z", range(1, 31)) + at("2026-01-02T00:00:00.000Z", range(31, 281))
                 + at("2026-01-02T00:00:00.001Z", range(281, 331)) + [{"id": 400 + i, "tags": [],
                 "updated_at": f"2026-01-03T00:00:{i:02d}.000Z"} for i in range(60)])
    queries = fake_listing(documents, keyed)
    listing = Listing(EngineClient(EngineSettings(url=URL, retry_attempts=1)), None)
    ids = [d["id"] for page, _ in listing.pages() for d in page]
    assert sorted(ids) == sorted(int(d["id"]) for d in documents)  # type: ignore[call-overload]
    assert len(ids) == len(set(ids)) and listing.by_time
    paged = [q for q in queries[1:]]
    assert all(("after" in q) == keyed and ("offset" in q) != keyed for q in paged), queries


@responses.activate
def test_ingests_plan_reads_the_collection_after_each_pages_last_key() -> None:
    """An agent deleting a note while ingest reads what its roots stored made an offset skip a stored file,
    which the run then uploaded again; the plan pages by key as export does."""
    from kb_bridge.cli.ingest_files import Root
    from kb_bridge.cli.ingest_plan import stored_by_engine

    root = Root(path=Path("/tmp/handbook"), prefix="handbook")
    documents = [{"id": i, "updated_at": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}.000Z", "source_path": f"handbook/{i}.md",
                  "tags": ["collection:h", root.tag], "sha256": "0" * 64} for i in range(1, 1201)]
    queries = fake_listing(documents)
    found = stored_by_engine(EngineClient(EngineSettings(url=URL, retry_attempts=1)), "collection:h", [root])
    assert len(found) == 1200 and len(queries) == 3
    assert all("offset" not in query for query in queries) and all("after" in query for query in queries[1:])
