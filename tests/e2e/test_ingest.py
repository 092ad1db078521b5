"""`kb-bridge ingest`, as a user runs it: a real CLI process against a real local engine (with the model).

Each test loads into a collection of its own, so the tests share one engine without seeing each other.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from kb_bridge.testing.processes import REPO, Service, clean_env, start_engine

KEY = "ingest-test-key-0123456789abcdef"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("ingest-engine")
    service = start_engine(tmp, tmp / "data", env={"KB_API_KEY": KEY, "KB_ENGINE_EMBED_BATCH": "4"})
    yield service
    service.stop()


def _env(engine: Service) -> dict[str, str]:
    return clean_env({"KB_ENGINE_URL": engine.url, "KB_API_KEY": KEY})


def ingest(engine: Service, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kb_bridge", "ingest", *args], env=_env(engine), cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def ingest_json(engine: Service, *args: str) -> tuple[int, dict[str, Any]]:
    result = ingest(engine, *args, "--json")
    return result.returncode, json.loads(result.stdout)


def documents(engine: Service, collection: str) -> list[dict[str, Any]]:
    response = requests.get(f"{engine.url}/api/v1/documents", params={"tag": f"collection:{collection}", "limit": 500},
                            headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    response.raise_for_status()
    return list(response.json()["documents"])


def search(engine: Service, query: str, collection: str) -> list[dict[str, Any]]:
    response = requests.post(f"{engine.url}/api/v1/search", headers={"Authorization": f"Bearer {KEY}"}, timeout=30,
                             json={"query": query, "mode": "fts", "tags": [f"collection:{collection}"]})
    response.raise_for_status()
    return list(response.json()["results"])


def test_a_folder_is_added_then_skipped_then_updated(engine: Service, tmp_path: Path) -> None:
    handbook = tmp_path / "handbook"
    (handbook / "guides").mkdir(parents=True)
    (handbook / ".git").mkdir()
    (handbook / "intro.md").write_text("# Intro\n\nThe handbook starts with the kingfisher survey.")
    (handbook / "guides" / "setup.txt").write_text("Set up the hide before dawn near the reed beds.")
    (handbook / ".git" / "config.md").write_text("hidden: never loaded")
    (handbook / "tool.exe").write_bytes(b"MZ")

    code, report = ingest_json(engine, str(handbook), "--collection", "handbook", "--tags", "team,2026")
    assert code == 0, report
    assert (report["added"], report["updated"], report["skipped"], report["failed"]) == (2, 0, 0, 0)
    assert report["unsupported"] == ["handbook/tool.exe"]
    stored = {doc["source_path"]: doc for doc in documents(engine, "handbook")}
    assert set(stored) == {"handbook/intro.md", "handbook/guides/setup.txt"}
    tags = set(stored["handbook/intro.md"]["tags"])
    roots = {tag for tag in tags if tag.startswith("ingest-root:")}  # which folder loaded it (ingest_files.py)
    assert tags - roots == {"collection:handbook", "team", "2026"} and len(roots) == 1
    assert stored["handbook/guides/setup.txt"]["title"] == "setup.txt"

    code, report = ingest_json(engine, str(handbook), "--collection", "handbook", "--tags", "team,2026")
    assert code == 0 and (report["added"], report["updated"], report["skipped"]) == (0, 0, 2)

    (handbook / "guides" / "setup.txt").write_text("Set up the hide at noon by the willow instead.")
    code, report = ingest_json(engine, str(handbook), "--collection", "handbook")
    assert code == 0 and (report["added"], report["updated"], report["skipped"]) == (0, 1, 1)
    after = {doc["source_path"]: doc for doc in documents(engine, "handbook")}
    assert len(after) == 2 and after["handbook/guides/setup.txt"]["id"] != stored["handbook/guides/setup.txt"]["id"]
    assert search(engine, "willow", "handbook") and not search(engine, "dawn reed", "handbook")


def test_glob_narrows_the_files_and_plain_output_summarises(engine: Service, tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("alpha grebe")
    (notes / "b.txt").write_text("beta grebe")
    result = ingest(engine, str(notes), "--collection", "globbed", "--glob", "*.md")
    assert result.returncode == 0, result.stderr
    assert "added 1, updated 0, skipped 0 (unchanged), failed 0" in result.stdout
    assert "indexing:" in result.stderr  # plain progress lines when stderr is not a terminal
    assert [doc["source_path"] for doc in documents(engine, "globbed")] == ["notes/a.md"]


def test_a_file_that_fails_is_reported_and_the_exit_code_is_1(engine: Service, tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "good.txt").write_text("a good file about avocets")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 not really a pdf")
    code, report = ingest_json(engine, str(folder), "--collection", "mixed")
    assert code == 1
    assert (report["added"], report["failed"]) == (1, 1)
    assert report["failures"][0]["source_path"] == "mixed/broken.pdf" and "pdf" in report["failures"][0]["reason"].lower()
    result = ingest(engine, str(folder), "--collection", "mixed")  # the good file is skipped; the bad fails again
    assert result.returncode == 1 and "failed: mixed/broken.pdf" in result.stdout


def test_usage_errors_exit_2_naming_the_problem(engine: Service, tmp_path: Path) -> None:
    missing = ingest(engine, str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    bad = ingest(engine, str(tmp_path), "--collection", "Not A Name")
    assert bad.returncode == 2 and "--collection" in bad.stderr
    reserved = ingest(engine, str(tmp_path), "--tags", "collection:other")
    assert reserved.returncode == 2 and "--tags" in reserved.stderr


def test_ctrl_c_stops_cleanly_and_a_rerun_continues_where_it_stopped(engine: Service, tmp_path: Path) -> None:
    folder = tmp_path / "bulk"
    folder.mkdir()
    count = 120
    for i in range(count):
        # Four chunks each (480 in all): the engine must still be embedding when Ctrl-C comes, however fast its
        # model runs (one chunk per file was done before the signal on a fast int8 model under load).
        (folder / f"file{i:03d}.txt").write_text(f"Field report {i}: sightings of curlew {i} at the estuary. " * 60)
    process = subprocess.Popen([sys.executable, "-m", "kb_bridge", "ingest", str(folder), "--collection", "bulk"],
                               env=_env(engine), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    deadline = time.monotonic() + 120
    for line in process.stderr:  # uploads are done when indexing starts; the engine is still embedding
        if line.startswith("indexing:") or time.monotonic() > deadline:
            break
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "Traceback" not in err
    interrupted = re.search(r"interrupted: (\d+) file", out)
    assert interrupted and int(interrupted.group(1)) > 0, out  # stopped with files still to index
    first = len(documents(engine, "bulk"))

    code, report = ingest_json(engine, str(folder), "--collection", "bulk")
    assert code == 0, report
    assert report["added"] + report["skipped"] == count and report["failed"] == 0
    stored = documents(engine, "bulk")
    assert len(stored) == count  # no second copy of a file whose job was queued before Ctrl-C
    assert len({doc["source_path"] for doc in stored}) == count
    assert first <= report["skipped"]


def test_an_unreachable_engine_is_a_clear_failure(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("text")
    env = clean_env({"KB_ENGINE_URL": "http://127.0.0.1:9", "KB_API_KEY": KEY, "KB_ENGINE_RETRIES": "1"})
    result = subprocess.run([sys.executable, "-m", "kb_bridge", "ingest", str(tmp_path)], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "unreachable" in result.stderr and "Traceback" not in result.stderr
    assert os.path.exists(tmp_path / "a.txt")


def test_links_out_of_the_folder_are_skipped_and_reported_and_links_inside_followed_once(
        engine: Service, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "private").mkdir(parents=True)
    (outside / "credentials.txt").write_text("aws_secret_access_key = pelicansecret0123456789")
    (outside / "private" / "keys.md").write_text("the heronprivate key material")
    folder = tmp_path / "linked"
    (folder / "docs").mkdir(parents=True)
    (folder / "docs" / "real.md").write_text("The real note about spoonbills.")
    (folder / "creds.txt").symlink_to(outside / "credentials.txt")  # a file outside
    (folder / "private").symlink_to(outside / "private", target_is_directory=True)  # a folder outside
    (folder / "loop.md").symlink_to(folder / "loop.md")  # a link to itself
    (folder / "docs" / "again").symlink_to(folder, target_is_directory=True)  # a cycle back to the root
    (folder / "alias.md").symlink_to(folder / "docs" / "real.md")  # a file inside: loaded once, as its target

    code, report = ingest_json(engine, str(folder), "--collection", "linked")
    assert code == 0, report
    assert (report["added"], report["failed"]) == (1, 0)
    skipped = {link["path"]: link["reason"] for link in report["links_skipped"]}
    assert set(skipped) == {"linked/creds.txt", "linked/private", "linked/loop.md"}, skipped
    assert "outside" in skipped["linked/creds.txt"] and "outside" in skipped["linked/private"]
    assert "loop" in skipped["linked/loop.md"]
    assert [doc["source_path"] for doc in documents(engine, "linked")] == ["linked/docs/real.md"]
    assert not search(engine, "pelicansecret0123456789", "linked") and not search(engine, "heronprivate", "linked")

    # A root that is itself a link counts as the folder it points to: same source paths, nothing new.
    via_link = tmp_path / "shortcut"
    via_link.symlink_to(folder, target_is_directory=True)
    plain = ingest(engine, str(via_link), "--collection", "linked")
    assert plain.returncode == 0, plain.stderr
    assert "added 0, updated 0, skipped 1 (unchanged), failed 0" in plain.stdout
    assert "skipped link: linked/creds.txt: points outside the folders given" in plain.stdout
    assert len(documents(engine, "linked")) == 1


def test_one_folder_loads_into_two_collections(engine: Service, tmp_path: Path) -> None:
    """The upload's Idempotency-Key names the tags it sends: the engine refuses a key used again with another
    body, so loading a folder into a second collection within the key's 24 hours failed every file ("already
    used with a different request body")."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "plan.md").write_text("The heron count moves to the north lake this spring.")
    for collection, tags in (("twice-a", "x"), ("twice-b", "x")):
        code, report = ingest_json(engine, str(shared), "--collection", collection, "--tags", tags)
        assert code == 0 and report["failed"] == 0, report
    for collection in ("twice-a", "twice-b"):
        assert [doc["source_path"] for doc in documents(engine, collection)] == ["shared/plan.md"]
