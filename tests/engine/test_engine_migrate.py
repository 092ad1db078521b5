"""`kb-bridge migrate --from-sqlite DIR --to postgresql://...`: a SQLite store round-trips into PostgreSQL with
its ids, versions, tags, chunks and vectors (not re-embedded); a rerun copies only what is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import flask
import numpy as np
import psycopg

from kb_bridge.local_engine.app import engine_of
from kb_bridge.local_engine.embedding.embedder import Embedder
from kb_bridge.testing.postgres import PostgresServer
from kb_bridge.testing.processes import clean_env

from .helpers import API, add_note, upload, wait_job


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


def test_migrate_refuses_a_directory_without_a_store(tmp_path: Path) -> None:
    code, _, err = migrate(tmp_path, "postgresql://kb@127.0.0.1/kb")
    assert code == 2 and "--from-sqlite" in err
