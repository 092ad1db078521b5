"""`kb-bridge migrate --from-sqlite DIR --to postgresql://...`: a SQLite store round-trips into PostgreSQL with
its ids, versions, tags, chunks and vectors (not re-embedded); a rerun copies only what is missing."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import flask
import numpy as np
import psycopg
import pytest

from kb_bridge.local_engine.app import engine_of
from kb_bridge.local_engine.embedding.embedder import Embedder
from kb_bridge.testing.postgres import PostgresServer
from kb_bridge.testing.processes import clean_env

from kb_bridge.testing.engine_app import API, add_note, upload, wait_job


def migrate(data: Path, url: str) -> tuple[int, dict[str, object], str]:
    done = subprocess.run([sys.executable, "-m", "kb_bridge", "migrate", "--from-sqlite", str(data), "--to", url,
                           "--json"], env=clean_env({}), capture_output=True, text=True, timeout=300)
    return done.returncode, (json.loads(done.stdout) if done.stdout.strip() else {}), done.stderr


def test_a_sqlite_store_round_trips_into_postgresql(make_app: Callable[..., flask.Flask], model: Embedder,
                                                    tmp_path: Path, postgres_server: PostgresServer) -> None:
    data = tmp_path / "sqlite-data"
    source = make_app(model=model, data_dir=data, database_url=None)
    client = source.test_client()
    first = add_note(client, "Herons stand still in shallow water waiting for fish", tags=["birds", "memory"])
    gone = add_note(client, "a note that is deleted before the migration")
    edited = add_note(client, "Cormorants dry their wings in the sun")
    assert client.patch(f"{API}/notes/{edited['id']}", json={"text": "Cormorants dry their wings after diving"},
                        headers={"If-Match": '"1"'}).status_code == 200
    assert client.delete(f"{API}/documents/{gone['id']}").status_code == 204
    job = wait_job(client, upload(client, "estuary.md",
                                  ("# Estuaries\n\n" + "Mudflats feed wading birds at low tide. " * 80).encode()).json["id"])
    before = {doc["id"]: doc for doc in client.get(f"{API}/documents").json["documents"]}
    vector_before = engine_of(source).store.vector_of(1)  # the first note's chunk
    engine_of(source).close()

    url = postgres_server.new_database()
    code, report, err = migrate(data, url)
    assert code == 0, err
    assert report["ok"] is True and report["copied"] == 3
    assert report["found"] == report["expected"]
    assert "password" not in err

    code, again, _ = migrate(data, url)  # idempotent: nothing copied twice
    assert code == 0 and again["copied"] == 0 and again["found"] == report["found"]

    with psycopg.connect(url) as conn:  # an interrupted run: the last document never arrived
        conn.execute("DELETE FROM documents WHERE id = %s", (job["document_id"],))
    code, resumed, _ = migrate(data, url)
    assert code == 0 and resumed["copied"] == 1 and resumed["found"] == report["found"]

    target = make_app(model=model, data_dir=tmp_path / "replica", database_url=url)
    pg = target.test_client()
    after = {doc["id"]: doc for doc in pg.get(f"{API}/documents").json["documents"]}
    assert after == before  # same ids, versions, tags, chunk counts, timestamps
    assert after[edited["id"]]["version"] == 2 and gone["id"] not in after
    store = engine_of(target).store
    assert store.vector_count() == report["expected"]["vectors"] > 0  # type: ignore[index]
    vector_after = store.vector_of(1)
    assert vector_before is not None and vector_after is not None
    assert float(np.dot(vector_before, vector_after)) > 0.999  # the same vector, not re-embedded
    for mode in ("fts", "vector", "hybrid"):
        hits = pg.post(f"{API}/search", json={"query": "herons waiting for fish", "mode": mode}).json["results"]
        assert hits[0]["document_id"] == first["id"], mode
    original = pg.get(f"{API}/documents/{job['document_id']}/original")  # the uploaded file came along
    assert original.status_code == 200 and original.data.startswith(b"# Estuaries\n\nMudflats feed")
    new = add_note(pg, "a note written after the migration")
    assert new["id"] > max(before)  # ids continue after the copied ones


def test_a_notes_history_changed_by_and_duplicate_key_come_along(make_app: Callable[..., flask.Flask],
                                                                  tmp_path: Path,
                                                                  postgres_server: PostgresServer) -> None:
    data = tmp_path / "sqlite-data"
    source = make_app(data_dir=data, database_url=None)
    client = source.test_client()
    first = "Avocets sweep their upturned bills through the water"
    note = add_note(client, first, tags=["collection:memory"], unique_in="collection:memory", changed_by="alice")
    for text, who in (("Avocets sweep their bills side to side", "bob"), ("Avocets sweep for shrimp", "carol")):
        assert client.patch(f"{API}/notes/{note['id']}", json={"text": text, "changed_by": who}).status_code == 200
    plain = add_note(client, "a note of a store without history")  # no versions, no key
    versions_before = client.get(f"{API}/documents/{note['id']}/versions").json["versions"]
    engine_of(source).close()

    url = postgres_server.new_database()
    code, report, err = migrate(data, url)
    assert code == 0, err
    assert report["expected"]["versions"] == report["found"]["versions"] == 2  # type: ignore[index]

    pg = make_app(data_dir=tmp_path / "replica", database_url=url).test_client()
    assert pg.get(f"{API}/documents/{note['id']}/versions").json["versions"] == versions_before
    assert [(v["version"], v["changed_by"]) for v in versions_before] == [(3, "carol"), (2, "bob"), (1, "alice")]
    assert pg.get(f"{API}/documents/{note['id']}?version=1").json["content"] == first
    assert pg.get(f"{API}/documents/{note['id']}").json["changed_by"] == "carol"
    assert pg.get(f"{API}/documents/{plain['id']}/versions").json["versions"][0]["changed_by"] is None
    # The key moved with the note's text: its current text is a duplicate in the collection, its first is not.
    again = pg.post(f"{API}/jobs", json={"text": "Avocets  sweep for shrimp ", "tags": ["collection:memory"],
                                         "unique_in": "collection:memory"})
    assert again.status_code == 200 and again.json["duplicate_of"] == note["id"], again.json
    assert pg.post(f"{API}/jobs", json={"text": first, "tags": ["collection:memory"],
                                        "unique_in": "collection:memory"}).status_code == 202


def test_an_older_stores_unpadded_years_arrive_in_four_digits(make_app: Callable[..., flask.Flask],
                                                              tmp_path: Path, postgres_server: PostgresServer) -> None:
    """Engines before SQLite schema 10 wrote a year before 1000 unpadded ("999-06-01T…"); schema 10 repairs
    such times when the engine opens the store, but `migrate` reads a store as it is, and the PostgreSQL
    schema's own repair (version 8) ran on an empty database. Unrepaired, the time sorted after every other
    (listed first, "created after 2020", never "before 1500"). Built here as an engine of 2026-11-26 (schema
    9) left it: a note imported with such times and edited once."""
    data = tmp_path / "sqlite-data"
    source = make_app(data_dir=data, database_url=None)
    client = source.test_client()
    old = add_note(client, "A chronicle of the abbey, copied in the tenth century")
    assert client.patch(f"{API}/notes/{old['id']}", json={"text": "A chronicle of the abbey"}).status_code == 200
    recent = add_note(client, "A note of today")
    engine_of(source).close()
    with sqlite3.connect(data / "engine.sqlite3") as conn:
        conn.execute("UPDATE documents SET created_at = '999-06-01T00:00:00.000Z', "
                     "updated_at = '999-06-02T00:00:00.000Z' WHERE id = ?", (old["id"],))
        conn.execute("UPDATE document_versions SET updated_at = '999-06-01T00:00:00.000Z' WHERE document_id = ?",
                     (old["id"],))
        conn.execute("PRAGMA user_version = 9")

    url = postgres_server.new_database()
    code, report, err = migrate(data, url)
    assert code == 0 and report["ok"] is True, err
    pg = make_app(data_dir=tmp_path / "replica", database_url=url).test_client()
    document = pg.get(f"{API}/documents/{old['id']}").json
    assert (document["created_at"], document["updated_at"]) == ("0999-06-01T00:00:00.000Z", "0999-06-02T00:00:00.000Z")
    assert pg.get(f"{API}/documents/{old['id']}/versions").json["versions"][1]["updated_at"] == "0999-06-01T00:00:00.000Z"
    assert [d["id"] for d in pg.get(f"{API}/documents").json["documents"]] == [recent["id"], old["id"]]
    assert [d["id"] for d in pg.get(f"{API}/documents?created_before=1500-01-01").json["documents"]] == [old["id"]]


def test_a_target_holding_other_documents_with_the_same_ids_fails_naming_them(
        make_app: Callable[..., flask.Flask], tmp_path: Path, postgres_server: PostgresServer) -> None:
    """A document whose id the target already holds was skipped as "already copied" whatever it held, and
    the report said ok (the target's own documents made up the counts): the source's document was dropped
    without a word. Only the same document (a resumed run) is skipped now; another one is reported."""
    data = tmp_path / "sqlite-data"
    source = make_app(data_dir=data, database_url=None).test_client()
    clash = add_note(source, "the source's first note: herons")
    fresh = add_note(source, "the source's second note: egrets")
    url = postgres_server.new_database()
    target = make_app(data_dir=tmp_path / "pg", database_url=url).test_client()
    other = add_note(target, "the target's own first note: bitterns")
    assert other["id"] == clash["id"]

    code, report, err = migrate(data, url)
    assert code == 1 and report["ok"] is False, (report, err)
    assert report["skipped"] == [{"id": clash["id"], "reason": report["skipped"][0]["reason"]}]  # type: ignore[index]
    assert "different document" in report["skipped"][0]["reason"]  # type: ignore[index]
    assert f"document {clash['id']} skipped" in err
    assert target.get(f"{API}/documents/{other['id']}").json["content"] == "the target's own first note: bitterns"
    assert report["copied"] == 1 and target.get(f"{API}/documents/{fresh['id']}").status_code == 200
    code, again, _ = migrate(data, url)  # a rerun says the same, copies nothing more
    assert code == 1 and again["copied"] == 0 and again["skipped"] == report["skipped"]


def test_migrate_refuses_a_directory_without_a_store(tmp_path: Path) -> None:
    code, _, err = migrate(tmp_path, "postgresql://kb@127.0.0.1/kb")
    assert code == 2 and "--from-sqlite" in err


def test_the_target_is_kb_engine_database_url_so_its_password_need_not_be_on_the_command_line(
        make_app: Callable[..., flask.Flask], tmp_path: Path, postgres_server: PostgresServer) -> None:
    """`--to` was required, and the README's example passed "$KB_ENGINE_DATABASE_URL" to it: the password was in
    the command's arguments, which every user of the machine reads (ps, /proc/PID/cmdline) while it runs."""
    data = tmp_path / "sqlite-data"
    source = make_app(data_dir=data, database_url=None)
    add_note(source.test_client(), "Avocets sweep their upturned bills through the shallows")
    engine_of(source).close()
    url = postgres_server.new_database()
    argv = [sys.executable, "-m", "kb_bridge", "migrate", "--from-sqlite", str(data), "--json"]
    done = subprocess.run(argv, env=clean_env({"KB_ENGINE_DATABASE_URL": url}), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["copied"] == 1 and not nothing_written(url)
    assert url not in argv

    neither = subprocess.run(argv, env=clean_env({}), capture_output=True, text=True, timeout=60)
    assert neither.returncode == 2 and "KB_ENGINE_DATABASE_URL" in neither.stderr, neither.stderr
    assert len(neither.stderr.strip().splitlines()) == 1


def nothing_written(url: str) -> bool:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT to_regclass('documents') IS NULL").fetchone()[0] is True  # type: ignore[index]


def test_a_document_postgresql_cannot_hold_is_reported_and_the_rest_is_copied(
        make_app: Callable[..., flask.Flask], tmp_path: Path, postgres_server: PostgresServer) -> None:
    """An older engine's SQLite store may hold a NUL character (U+0000), which PostgreSQL text cannot: that
    document is named by id and skipped, the others arrive, and the exit status says something is missing."""
    data = tmp_path / "sqlite-data"
    source = make_app(data_dir=data, database_url=None)
    client = source.test_client()
    notes = [add_note(client, f"Note {n} about godwits on the mudflat", tags=["birds"]) for n in range(6)]
    engine_of(source).close()
    bad_text, bad_title, bad_size = notes[1]["id"], notes[3]["id"], notes[5]["id"]
    with sqlite3.connect(data / "engine.sqlite3") as conn:  # as an engine that took NUL characters left it
        conn.execute("UPDATE document_content SET text = ? WHERE document_id = ?", ("private\x00words", bad_text))
        conn.execute("UPDATE chunks SET text = ? WHERE document_id = ?", ("private\x00words", bad_text))
        conn.execute("UPDATE documents SET title = ? WHERE id = ?", ("a\x00title", bad_title))
        conn.execute("UPDATE documents SET size_bytes = 'many' WHERE id = ?", (bad_size,))  # SQLite keeps it

    url = postgres_server.new_database()
    code, report, err = migrate(data, url)
    assert code == 1, err
    assert report["copied"] == 3 and report["ok"] is False
    assert [s["id"] for s in report["skipped"]] == [bad_text, bad_title, bad_size]  # type: ignore[index, union-attr]
    for skipped, field in zip(report["skipped"][:2], ("content", "title"), strict=True):  # type: ignore[index]
        assert "NUL" in skipped["reason"] and field in skipped["reason"], skipped
    # One PostgreSQL refuses by itself: the batch is retried a document at a time, and only that one is skipped.
    assert report["skipped"][2]["reason"].startswith("PostgreSQL refused it")  # type: ignore[index]
    assert all(f"document {i} skipped" in err for i in (bad_text, bad_title, bad_size))
    assert "private" not in err and "many" not in err and "Traceback" not in err
    with psycopg.connect(url) as conn:
        copied = [r[0] for r in conn.execute("SELECT id FROM documents ORDER BY id")]
        assert copied == [n["id"] for n in notes if n["id"] not in (bad_text, bad_title, bad_size)]
        assert conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 3  # type: ignore[index]

    code, again, err = migrate(data, url)  # a rerun copies nothing more and says the same
    assert code == 1 and again["copied"] == 0 and len(again["skipped"]) == 3  # type: ignore[arg-type]
    done = subprocess.run([sys.executable, "-m", "kb_bridge", "migrate", "--from-sqlite", str(data), "--to", url],
                          env=clean_env({}), capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "skipped 3" in done.stdout and "Traceback" not in done.stderr


def _not_a_database(path: Path) -> None:
    path.write_bytes(b"SQLite format 2\x00 but not really " * 200)


def _another_applications_database(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE documents (name TEXT)")
        conn.execute("INSERT INTO documents VALUES ('x')")


def _truncated(path: Path) -> None:
    with open(path, "r+b") as file:
        file.truncate(path.stat().st_size * 2 // 3)


def _endless_view(path: Path) -> None:
    """`documents` replaced by a view that never ends: reading it would hang the migration."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("DROP TABLE documents")
        conn.execute("CREATE VIEW documents AS WITH RECURSIVE n(id) AS (SELECT 1 UNION ALL SELECT id + 1 FROM n) "
                     "SELECT id, 'a' AS title, 'note' AS doc_type, NULL AS source_path, 1 AS size_bytes, 'x' AS sha256, "
                     "1 AS version, '2020-01-01' AS created_at, NULL AS updated_at FROM n")


def _newer_schema(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 999")


@pytest.mark.parametrize("spoil", [_not_a_database, _another_applications_database, _truncated, _endless_view,
                                   _newer_schema])
def test_a_hostile_sqlite_file_is_one_line_and_nothing_is_written(
        make_app: Callable[..., flask.Flask], tmp_path: Path, postgres_server: PostgresServer,
        spoil: Callable[[Path], None]) -> None:
    data = tmp_path / "sqlite-data"
    source = make_app(data_dir=data, database_url=None)
    client = source.test_client()
    for n in range(40):  # enough pages that a cut loses some of them
        add_note(client, f"Note {n}: " + "redshanks probe the mud for worms " * 60)
    engine_of(source).close()
    if spoil in (_not_a_database, _another_applications_database):
        (data / "engine.sqlite3").unlink()
    spoil(data / "engine.sqlite3")
    url = postgres_server.new_database()
    done = subprocess.run([sys.executable, "-m", "kb_bridge", "migrate", "--from-sqlite", str(data), "--to", url],
                          env=clean_env({}), capture_output=True, text=True, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("kb-bridge migrate: --from-sqlite:"), done.stderr
    assert nothing_written(url)


def test_a_store_with_jobs_not_done_yet_is_refused_until_they_finish(
        make_app: Callable[..., flask.Flask], tmp_path: Path, postgres_server: PostgresServer) -> None:
    """An engine stopped with queued jobs resumes them at its next start; it answered 202 for each. Only
    documents are copied, so a migration of such a store reported every count ok and exit 0 while the
    queued note and file were gone: it refuses now, naming the jobs, and copies them once they are done."""
    data = tmp_path / "sqlite-data"
    source = make_app(data_dir=data, database_url=None)
    client = source.test_client()
    kept = add_note(client, "Knots gather in tight flocks over the estuary")
    engine_of(source).worker.stop(5)  # the engine is stopped with these jobs still queued
    note = client.post(f"{API}/jobs", json={"text": "Sanderlings chase the waves"})
    file = upload(client, "dunlin.txt", b"Dunlins feed in the mud at low tide")
    assert note.status_code == 202 and file.status_code == 202
    engine_of(source).close()

    url = postgres_server.new_database()
    code, report, err = migrate(data, url)
    assert code == 1 and report == {}, (code, report, err)
    assert f"note job {note.json['id']}" in err and f"file job {file.json['id']}" in err, err
    assert "let them finish" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert nothing_written(url)

    restarted = make_app(data_dir=data, database_url=None)  # the engine finishes them
    done = [wait_job(restarted.test_client(), job.json["id"]) for job in (note, file)]
    assert [job["status"] for job in done] == ["done", "done"]
    engine_of(restarted).close()
    code, report, err = migrate(data, url)
    assert code == 0 and report["copied"] == 3, err
    pg = make_app(data_dir=tmp_path / "replica", database_url=url).test_client()
    assert pg.get(f"{API}/documents/{kept['id']}").status_code == 200
    assert pg.get(f"{API}/documents/{done[0]['document_id']}").json["content"] == "Sanderlings chase the waves"
    assert pg.get(f"{API}/documents/{done[1]['document_id']}/original").data == b"Dunlins feed in the mud at low tide"
