"""The command line for people against the real local engine: search, add, get, delete with their exit
codes; export and import into a fresh engine (round trip, idempotent, the same hits with the same scores);
a backup taken while the engine serves writes, restored into a new engine."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.conftest import ENGINE_KEY
from kb_bridge.testing.files import minimal_pdf
from kb_bridge.testing.processes import REPO, Service, clean_env, start_engine, wait_until

SUFFIX = str(os.getpid())
COLLECTION = f"cli-{SUFFIX}"
HEADERS = {"Authorization": f"Bearer {ENGINE_KEY}"}


def kb(engine: Service, *args: str, stdin: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = clean_env({"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY})
    return subprocess.run([sys.executable, "-m", "kb_bridge", *args], input=stdin, capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=timeout)


def engine_get(engine: Service, path: str, **params: Any) -> Any:
    response = requests.get(engine.url + "/api/v1" + path, params=params, headers=HEADERS, timeout=30)
    response.raise_for_status()
    return response.json()


def data_dir_of(engine: Service) -> Path:
    argv = list(engine.process.args)  # type: ignore[arg-type]
    return Path(argv[argv.index("--data") + 1])


def test_add_search_get_delete_and_their_exit_codes(engine: Service) -> None:
    added = kb(engine, "add", f"Ospreys nest on platforms near water {SUFFIX}.", "--collection", COLLECTION,
               "--title", "Osprey nests", "--tags", "birds,nests", "--json")
    assert added.returncode == 0, added.stderr
    document_id = json.loads(added.stdout)["document_id"]
    from_stdin = kb(engine, "add", "-", "--collection", COLLECTION, stdin=f"Kestrels hover over fields {SUFFIX}.\n")
    assert from_stdin.returncode == 0 and from_stdin.stdout.startswith("Added document #")

    found = kb(engine, "search", f"osprey platforms {SUFFIX}", "--collection", COLLECTION)
    assert found.returncode == 0
    header, rule, first, *_ = found.stdout.splitlines()
    assert header.split() == ["score", "id", "collection", "title", "snippet"] and set(rule.replace(" ", "")) == {"-"}
    assert f" {document_id} " in f" {first} " and "Osprey nests" in first
    as_json = json.loads(kb(engine, "search", "kestrels hover", "--collection", COLLECTION, "--top", "1", "--json").stdout)
    assert len(as_json["results"]) == 1 and "Kestrels" in as_json["results"][0]["text"]

    shown = kb(engine, "get", str(document_id))
    assert shown.returncode == 0 and "# Osprey nests" in shown.stdout and f"collection {COLLECTION}" in shown.stdout
    assert "tags birds, nests" in shown.stdout and "version 1" in shown.stdout
    assert json.loads(kb(engine, "get", str(document_id), "--json").stdout)["id"] == document_id

    assert kb(engine, "delete", str(document_id)).returncode == 0
    missing = kb(engine, "get", str(document_id))
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr
    assert kb(engine, "delete", str(document_id)).returncode == 1

    too_many = kb(engine, "search", "x", "--top", "500")
    assert too_many.returncode == 2 and "top" in too_many.stderr
    assert kb(engine, "get", "not-a-number").returncode == 2
    assert kb(engine, "add").returncode == 2
    assert kb(engine, "add", "x", "--collection", "Not A Name").returncode == 2


SCORE_TOLERANCE = 0.02


def _empty_engine(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp(name)
    service = start_engine(tmp, tmp / "data", env={"KB_API_KEY": ENGINE_KEY})
    yield service
    service.stop()


# The round trip starts from an engine of its own: BM25 depends on the whole corpus (document frequencies,
# average length), so only an original holding exactly what was exported can be expected to score alike.
@pytest.fixture(scope="module")
def source_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    yield from _empty_engine(tmp_path_factory, "source-engine")


@pytest.fixture(scope="module")
def fresh_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    yield from _empty_engine(tmp_path_factory, "fresh-engine")


def test_export_then_import_into_a_fresh_engine(source_engine: Service, fresh_engine: Service, tmp_path: Path) -> None:
    engine = source_engine
    collection = f"export-{SUFFIX}"
    notes = [f"Puffins carry many fish at once {SUFFIX}.", f"Gannets dive from great heights {SUFFIX}."]
    for text in notes:
        assert kb(engine, "add", text, "--collection", collection, "--tags", "seabirds").returncode == 0
    pdf = minimal_pdf(f"Albatrosses glide for hours without flapping {SUFFIX}.")
    response = requests.post(engine.url + "/api/v1/jobs", headers=HEADERS, timeout=60, files={"file": ("albatross.pdf", pdf)},
                             data={"tags": json.dumps([f"collection:{collection}", "seabirds"]), "source_path": "birds/albatross.pdf"})
    assert response.status_code == 202
    job_id = response.json()["id"]
    wait_until(lambda: engine_get(engine, f"/jobs/{job_id}")["status"] == "done", 120, what="the PDF indexed")

    export_file = tmp_path / "kb.jsonl"
    exported = kb(engine, "export", str(export_file), "--collection", collection)
    assert exported.returncode == 0, exported.stderr
    records = [json.loads(line) for line in export_file.read_text().splitlines()]
    assert len(records) == 3
    by_type = {r["doc_type"]: r for r in records}
    assert {r["collection"] for r in records} == {collection} and all(r["tags"] == ["seabirds"] for r in records)
    assert by_type["pdf"]["filename"] == "albatross.pdf" and by_type["pdf"]["content_type"] == "application/pdf"
    assert base64.b64decode(by_type["pdf"]["original_base64"]) == pdf
    for key in ("id", "title", "version", "source_path", "text"):
        assert key in by_type["note"]

    imported = kb(fresh_engine, "import", str(export_file), "--json")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout) == {"added": 3, "skipped": 0, "failed": []}
    again = kb(fresh_engine, "import", str(export_file), "--json")
    assert json.loads(again.stdout) == {"added": 0, "skipped": 3, "failed": []}
    assert engine_get(fresh_engine, "/documents", tag=f"collection:{collection}")["total"] == 3

    # The copy answers like the original: the same hits, the same best one, each hit's score within
    # SCORE_TOLERANCE. Not the same order of near-tied hits: each engine picks its number format by measuring
    # (kb_bridge/local_engine/embedding/precision.py), and bfloat16 moves a cosine by a few thousandths.
    # A lost, missing or misplaced vector or text moves a score by 0.05 or more.
    for query in ("puffins fish", "birds that glide without flapping", "diving from heights"):
        before = json.loads(kb(engine, "search", query, "--collection", collection, "--json").stdout)["results"]
        after = json.loads(kb(fresh_engine, "search", query, "--collection", collection, "--json").stdout)["results"]
        scores_before = {h["title"]: h["score"] for h in before}
        scores_after = {h["title"]: h["score"] for h in after}
        assert scores_before.keys() == scores_after.keys() and before[0]["title"] == after[0]["title"], query
        assert all(abs(scores_before[t] - scores_after[t]) <= SCORE_TOLERANCE for t in scores_before), \
            (query, scores_before, scores_after)
    copied = engine_get(fresh_engine, "/documents", doc_type="pdf", tag=f"collection:{collection}")["documents"][0]
    original = requests.get(f"{fresh_engine.url}/api/v1/documents/{copied['id']}/original", headers=HEADERS, timeout=30)
    assert original.content == pdf and copied["source_path"] == "birds/albatross.pdf"


def test_a_backup_taken_while_the_engine_serves_writes(engine: Service, tmp_path: Path) -> None:
    confirmed: list[int] = []  # documents whose job was done before the backup started
    stop = threading.Event()
    started = threading.Event()

    def writer() -> None:
        number = 0
        while not stop.is_set():
            number += 1
            job = requests.post(engine.url + "/api/v1/jobs", headers=HEADERS, timeout=30, json={
                "text": f"Backup writer note {number} {SUFFIX}", "tags": [f"collection:backup-{SUFFIX}"]}).json()
            while not stop.is_set():
                done = engine_get(engine, f"/jobs/{job['id']}")
                if done["status"] == "done":
                    if not started.is_set():
                        confirmed.append(done["document_id"])
                    break
                stop.wait(0.02)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    wait_until(lambda: len(confirmed) >= 3, 60, what="some notes written before the backup")
    started.set()
    try:
        backup_dir = tmp_path / "backup"
        done = kb(engine, "backup", str(backup_dir), "--data", str(data_dir_of(engine)), "--json")
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
    finally:
        stop.set()
        thread.join(30)
    assert summary["documents"] >= len(confirmed)

    # Restore as the README says: the copy becomes a data directory of its own.
    restored_dir = tmp_path / "restored"
    restored_dir.mkdir()
    (backup_dir / "engine.sqlite3").rename(restored_dir / "engine.sqlite3")
    restored = start_engine(tmp_path, restored_dir, env={"KB_API_KEY": ENGINE_KEY})
    try:
        assert engine_get(restored, "/status")["documents"]["total"] == summary["documents"]
        for document_id in confirmed:
            assert engine_get(restored, f"/documents/{document_id}")["content"].startswith("Backup writer note")
        hits = requests.post(restored.url + "/api/v1/search", headers=HEADERS, timeout=30,
                             json={"query": "backup writer note", "tags": [f"collection:backup-{SUFFIX}"], "mode": "fts"}).json()
        assert hits["results"]
    finally:
        restored.stop()

    not_empty = kb(engine, "backup", str(tmp_path / "restored"), "--data", str(data_dir_of(engine)))
    assert not_empty.returncode == 2 and "not empty" in not_empty.stderr
    nothing = kb(engine, "backup", str(tmp_path / "other"), "--data", str(tmp_path / "no-engine-here"))
    assert nothing.returncode == 2 and "no local engine database" in nothing.stderr
