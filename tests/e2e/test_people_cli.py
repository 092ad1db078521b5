"""The command line for people against the real local engine: search, add, get, delete with their exit
codes; export and import into a fresh engine (round trip, idempotent, the same hits with the same scores);
a backup taken while the engine serves writes, restored into a new engine."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from kb_bridge.testing.processes import ENGINE_KEY
from kb_bridge.testing.files import minimal_pdf
from kb_bridge.testing.processes import REPO, Service, clean_env, start_engine, wait_until
from kb_bridge.testing.standin import StandInEngine

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


def test_text_that_is_not_utf8_is_a_usage_error_naming_the_argument_and_nothing_is_written(engine: Service) -> None:
    """Bytes that are not UTF-8, in an argument or on stdin, reach the tool as lone surrogates: refused (exit 2,
    naming the argument) before the engine is asked, not an engine failure with an unknown outcome."""
    collection = f"{COLLECTION}-bytes"
    # A UTF-8 locale (not C.UTF-8, which Python reads as C), whose sys.stdin is strict: `add -` reads it as argv.
    env = clean_env({"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "LC_ALL": "en_US.UTF-8", "PYTHONUTF8": "0"})
    for argv, stdin, field in (([b"caf\xe9 au lait"], None, b"text"), ([b"-"], b"caf\xe9 au lait\n", b"text"),
                               ([b"fine text", b"--title", b"Caf\xe9"], None, b"title")):
        added = subprocess.run([sys.executable.encode(), b"-m", b"kb_bridge", b"add", *argv, b"--collection",
                                collection.encode()], input=stdin, capture_output=True, cwd=REPO, env=env, timeout=300)
        assert added.returncode == 2, added.stderr
        assert added.stderr.startswith(b"kb-bridge add: " + field + b": ") and b"lone surrogate" in added.stderr
    assert json.loads(kb(engine, "list", "--collection", collection, "--json").stdout)["total"] == 0


def test_stored_escape_sequences_reach_the_terminal_as_text_not_as_commands(engine: Service) -> None:
    # A note an agent wrote (or a file's text) sets the terminal's title, writes its clipboard (OSC 52), colours
    # and overwrites lines (CR) if printed raw; --json keeps the text itself.
    hostile = f"Grebes dive {SUFFIX} \x1b]0;owned\x07 \x1b]52;c;aGk=\x07 \x1b[31mred\x1b[0m\rfake line \x9b2J end"
    added = kb(engine, "add", hostile, "--collection", f"{COLLECTION}-esc", "--title", "Grebes", "--json")
    assert added.returncode == 0, added.stderr
    document_id = str(json.loads(added.stdout)["document_id"])
    for args in (["get", document_id], ["search", f"grebes dive {SUFFIX}", "--collection", f"{COLLECTION}-esc"]):
        shown = kb(engine, *args)
        assert shown.returncode == 0, shown.stderr
        assert not [c for c in shown.stdout if ord(c) < 32 and c not in "\n\t" or 0x7f <= ord(c) <= 0x9f], shown.stdout
        assert "\\x1b]52;c;aGk=\\x07" in shown.stdout, shown.stdout  # shown, not run
    assert "\\x1b[31mred\\x1b[0m\\x0dfake line \\x9b2J end" in kb(engine, "get", document_id).stdout
    as_json = json.loads(kb(engine, "get", document_id, "--json").stdout)
    assert as_json["content"] == hostile


def test_get_keeps_a_stored_title_and_source_with_line_breaks_on_their_own_lines(engine: Service) -> None:
    """The bridge refuses line breaks in titles and sources; a client writing to the engine directly can store them,
    and `get` printed them raw, so the title ended its `#` line and the rest passed for the document's text."""
    added = kb(engine, "add", f"Coots nod as they swim {SUFFIX}.", "--collection", f"{COLLECTION}-lines", "--json")
    document_id = json.loads(added.stdout)["document_id"]
    moved = requests.patch(f"{engine.url}/api/v1/documents/{document_id}", headers=HEADERS, timeout=30,
                           json={"title": "Coots\nForged line", "source_path": "birds/\ncoots.md"})
    assert moved.status_code == 200, moved.text
    lines = kb(engine, "get", str(document_id)).stdout.splitlines()
    assert lines[0] == "# Coots Forged line" and lines[1] == ""
    assert lines[3].startswith("source birds/ coots.md · updated"), lines


def test_an_id_not_written_in_ascii_digits_is_a_usage_error_and_names_no_other_document(engine: Service) -> None:
    ids = [json.loads(kb(engine, "add", f"Loons call at night {SUFFIX} {n}.", "--collection", f"{COLLECTION}-ids",
                         "--json").stdout)["document_id"] for n in range(11)]
    target = str(max(ids))  # two digits or more
    for spelling in (f"{target[0]}_{target[1:]}", target.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")),
                     f" {target}", f"+{target}"):
        for args in (["delete", spelling], ["get", spelling], ["history", spelling], ["get", target, "--version", spelling]):
            refused = kb(engine, *args)
            assert refused.returncode == 2, (args, refused)
            assert "is not a number in ASCII digits" in refused.stderr, refused.stderr
    assert kb(engine, "get", target).returncode == 0  # still there


def test_search_shows_the_passage_that_matched_not_the_start_of_the_chunk(engine: Service) -> None:
    filler = " ".join(f"Gannets plunge for fish at sea, colony {n}." for n in range(20))
    text = f"{filler} Albatrosses glide for hours without a wingbeat {SUFFIX}."
    assert kb(engine, "add", text, "--collection", COLLECTION).returncode == 0
    env = clean_env({"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY, "COLUMNS": "400"})
    found = subprocess.run([sys.executable, "-m", "kb_bridge", "search", f"albatrosses wingbeat {SUFFIX}",
                            "--collection", COLLECTION, "--top", "1", "--mode", "fts"],
                           capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert found.returncode == 0, found.stderr
    row = found.stdout.splitlines()[2]
    # The chunk starts with gannets; the snippet column is the engine's passage around the matched words.
    assert "Albatrosses glide" in row and "colony 0." not in row


def test_list_collections_tags_and_jobs(engine: Service) -> None:
    collection = f"{COLLECTION}-browse"
    ids = [json.loads(kb(engine, "add", f"Swifts sleep on the wing {SUFFIX} {n}.", "--collection", collection,
                         "--tags", f"swifts-{SUFFIX}", "--json").stdout)["document_id"] for n in range(3)]

    listed = kb(engine, "list", "--collection", collection, "--limit", "2")
    assert listed.returncode == 0, listed.stderr
    header, _rule, *rows, _blank, summary = listed.stdout.splitlines()
    assert header.split() == ["id", "collection", "updated", "title"] and len(rows) == 2
    assert summary == "2 of 3 document(s)."
    every = json.loads(kb(engine, "list", "--collection", collection, "--tag", f"swifts-{SUFFIX}", "--json").stdout)
    assert sorted(d["id"] for d in every["documents"]) == sorted(ids) and every["total"] == 3
    assert json.loads(kb(engine, "list", "--tag", f"no-such-tag-{SUFFIX}", "--json").stdout)["documents"] == []
    recent = json.loads(kb(engine, "list", "--collection", collection, "--since", "1h", "--json").stdout)
    assert recent["total"] == 3
    assert json.loads(kb(engine, "list", "--collection", collection, "--until", "1h", "--updated", "--json").stdout)["total"] == 0
    assert json.loads(kb(engine, "list", "--collection", collection, "--since", "2099-01-01", "--json").stdout)["total"] == 0
    bad = kb(engine, "list", "--since", "last tuesday")
    assert bad.returncode == 2 and "since" in bad.stderr
    for limit in ("0", "-5"):  # not "No documents."
        bad = kb(engine, "list", "--collection", collection, "--limit", limit)
        assert bad.returncode == 2 and bad.stderr.startswith("kb-bridge list: limit: must be at least 1"), bad

    collections = json.loads(kb(engine, "collections", "--json").stdout)["collections"]
    assert {"name": collection, "documents": 3} in [{k: c[k] for k in ("name", "documents")} for c in collections]
    assert collection in kb(engine, "collections").stdout

    tags = json.loads(kb(engine, "tags", "--json").stdout)["tags"]
    assert {"name": f"swifts-{SUFFIX}", "documents": 3} in tags
    assert not [t for t in tags if t["name"].startswith("collection:")]  # those are the collections

    done = json.loads(kb(engine, "jobs", "--status", "done", "--limit", "100", "--json").stdout)["jobs"]
    assert set(ids) <= {j["document_id"] for j in done} and {j["status"] for j in done} == {"done"}
    assert kb(engine, "jobs").stdout.split()[:6] == ["job", "type", "status", "created", "document", "file"]
    assert kb(engine, "jobs", "--status", "sleeping").returncode == 2
    assert kb(engine, "list", "--collection", "Not A Name").returncode == 2


def test_output_whose_reader_is_gone_ends_quietly_with_status_1(engine: Service) -> None:
    # `kb-bridge list | head -1`, made certain: the reader is gone before anything is written.
    env = clean_env({"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY})
    added = kb(engine, "add", f"Terns cross the equator {SUFFIX}.", "--collection", f"{COLLECTION}-pipe", "--json")
    document_id = str(json.loads(added.stdout)["document_id"])
    for args in (["list", "--collection", f"{COLLECTION}-pipe"], ["get", document_id, "--json"], ["tools"]):
        process = subprocess.Popen([sys.executable, "-m", "kb_bridge", *args], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, cwd=REPO, env=env)
        assert process.stdout is not None
        process.stdout.close()
        _, stderr = process.communicate(timeout=120)
        assert (process.returncode, stderr.decode()) == (1, ""), args  # no "Broken pipe", no "Exception ignored"


def test_get_history_lists_versions_and_shows_one_and_add_refuses_a_duplicate(engine: Service) -> None:
    text = f"Herons stand still in shallow water {SUFFIX}."
    added = kb(engine, "add", text, "--collection", COLLECTION, "--json")
    document_id = json.loads(added.stdout)["document_id"]
    for n, who in ((2, "alice"), (3, "bob")):
        patched = requests.patch(f"{engine.url}/api/v1/notes/{document_id}", headers={"X-API-Key": ENGINE_KEY},
                                 json={"text": f"{text} Edit {n}.", "changed_by": who}, timeout=30)
        assert patched.status_code == 200, patched.text

    history = kb(engine, "get", str(document_id), "--history")
    assert history.returncode == 0, history.stderr
    header, _rule, *rows = history.stdout.splitlines()
    assert header.split() == ["version", "updated", "changed", "by"]
    assert [row.split()[0] for row in rows] == ["3", "2", "1"] and "(current)" in rows[0]
    assert rows[0].split()[-1] == "bob" and rows[1].split()[-1] == "alice" and rows[2].split()[-1] == "local"
    first = kb(engine, "get", str(document_id), "--version", "1")
    assert first.returncode == 0 and "version 1" in first.stdout and first.stdout.rstrip().endswith(text)
    versions = json.loads(kb(engine, "get", str(document_id), "--json").stdout)["versions"]
    assert [v["version"] for v in versions] == [3, 2, 1]
    assert kb(engine, "history", str(document_id)).stdout == history.stdout  # `history ID` is `get ID --history`
    listed = json.loads(kb(engine, "history", str(document_id), "--json").stdout)
    assert listed == {"id": document_id, "versions": versions}
    assert kb(engine, "history", "not-a-number").returncode == 2

    again = kb(engine, "add", f"{text} Edit 3.", "--collection", COLLECTION)
    assert again.returncode == 0 and f"Not added: document #{document_id}" in again.stdout
    forced = kb(engine, "add", f"{text} Edit 3.", "--collection", COLLECTION, "--allow-duplicate", "--json")
    assert json.loads(forced.stdout)["document_id"] != document_id


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


def test_export_to_a_path_that_is_not_a_regular_file_is_refused_and_leaves_it_alone(engine: Service,
                                                                                     tmp_path: Path) -> None:
    # `kb-bridge export /dev/stdout` as root replaced the /dev/stdout link with a file holding every note, and
    # said it had exported them; a FIFO (`export >(gzip > kb.gz)`) was replaced the same way.
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    link = tmp_path / "stdout.jsonl"
    link.symlink_to(fifo)  # as /dev/stdout -> /proc/self/fd/1
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    for target in (fifo, link, folder):
        result = kb(engine, "export", str(target))
        assert result.returncode == 2, result
        assert result.stderr.startswith(f"kb-bridge export: FILE.jsonl: {target} is not a regular file"), result
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and link.is_symlink() and folder.is_dir()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["folder.jsonl", "pipe.jsonl", "stdout.jsonl"]


def test_export_to_standard_output_and_import_from_standard_input(engine: Service) -> None:
    # `-` named a file called "-" in the working directory; it is standard output for export, input for import.
    collection = f"stdio-export-{SUFFIX}"
    for text in (f"Dunlins flock over the estuary {SUFFIX}.", f"Knots gather in their thousands {SUFFIX}."):
        assert kb(engine, "add", text, "--collection", collection).returncode == 0
    exported = kb(engine, "export", "-", "--collection", collection)
    assert exported.returncode == 0, exported.stderr
    assert exported.stderr.endswith("Exported 2 document(s) to standard output.\n"), exported.stderr
    records = [json.loads(line) for line in exported.stdout.splitlines()]
    assert sorted(r["title"] for r in records) == sorted(d["title"] for d in documents_in(engine, collection))
    assert all(SUFFIX in r["text"] for r in records) and not (REPO / "-").exists()

    assert kb(engine, "delete", str(records[0]["id"])).returncode == 0
    imported = kb(engine, "import", "-", "--json", stdin=exported.stdout)
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout) == {"added": 1, "skipped": 1, "failed": []}
    assert sorted(d["title"] for d in documents_in(engine, collection)) == sorted(r["title"] for r in records)


def test_sigterm_stops_an_export_as_ctrl_c_does_leaving_no_part_file(tmp_path: Path) -> None:
    # By default SIGTERM (`timeout`, a service manager) ended the process at once: the export's
    # `.NAME.*.part`, which holds every note read so far, stayed beside the target.
    target = tmp_path / "kb.jsonl"
    with StandInEngine(delay=20) as engine:  # the listing never comes back while the test runs
        export = subprocess.Popen([sys.executable, "-m", "kb_bridge", "export", str(target)], cwd=REPO,
                                  env=clean_env({"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY}),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: any("/documents" in request for request in engine.received), 60,
                       what="the export listing the documents")
            assert [path.name for path in tmp_path.iterdir() if path.name.endswith(".part")]  # what SIGTERM left
            export.send_signal(signal.SIGTERM)
            _, stderr = export.communicate(timeout=30)
        finally:
            export.kill()
    assert export.returncode == 130, stderr
    assert stderr == f"kb-bridge export: interrupted; nothing was written to {target}\n", stderr
    assert list(tmp_path.iterdir()) == []


def test_the_part_file_of_a_killed_export_is_removed_by_the_next_export_and_no_other(engine: Service,
                                                                                       tmp_path: Path) -> None:
    # SIGKILL (or a crash, a power cut) leaves the `.NAME.*.part`, a copy of every note read so far, for ever.
    target = tmp_path / "kb.jsonl"
    with StandInEngine(delay=20) as standin:
        killed = subprocess.Popen([sys.executable, "-m", "kb_bridge", "export", str(target)], cwd=REPO,
                                  env=clean_env({"KB_ENGINE_URL": standin.url, "KB_API_KEY": ENGINE_KEY}),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: any("/documents" in request for request in standin.received), 60,
                       what="the export listing the documents")
        finally:
            killed.kill()
            killed.wait(30)
    [abandoned] = list(tmp_path.iterdir())
    an_hour_ago = time.time() - 3600
    os.utime(abandoned, (an_hour_ago, an_hour_ago))
    # Another export's file, still being written (it holds the lock), and one just made (not locked yet).
    running = tmp_path / ".kb.jsonl.running.part"
    running.write_text("")
    os.utime(running, (an_hour_ago, an_hour_ago))
    just_made = tmp_path / ".kb.jsonl.new.part"
    just_made.write_text("")
    other_target = tmp_path / ".other.jsonl.old.part"
    other_target.write_text("")
    os.utime(other_target, (an_hour_ago, an_hour_ago))
    with open(running) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        exported = kb(engine, "export", str(target), "--collection", COLLECTION)
    assert exported.returncode == 0, exported.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        ["kb.jsonl", running.name, just_made.name, other_target.name])


def test_an_ingest_state_file_that_is_not_a_regular_file_is_refused_and_left_alone(engine: Service,
                                                                                    tmp_path: Path) -> None:
    # The state file is replaced by a rename, as export's file is: a FIFO there also blocked the run's first read.
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("# Grebes\n\nGrebes dive for fish.\n", encoding="utf-8")
    fifo = tmp_path / "state.json"
    os.mkfifo(fifo)
    result = kb(engine, "ingest", str(folder), "--collection", f"{COLLECTION}-state", "--state", str(fifo))
    assert result.returncode == 2, result
    assert result.stderr.startswith(f"kb-bridge ingest: --state: {fifo} is not a regular file"), result
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_import_of_a_folder_is_refused_before_anything_is_sent(engine: Service, tmp_path: Path) -> None:
    refused = kb(engine, "import", str(tmp_path))
    assert refused.returncode == 2, refused
    # one line, not "what was sent stays queued in the engine: run the same command again"
    assert refused.stderr == f"kb-bridge import: FILE: cannot read {tmp_path}: Is a directory\n", refused.stderr


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


# --- import: bad records, reruns after Ctrl-C, memory ---------------------------------------------------------


def note_record(collection: str, number: int, text: str) -> dict[str, Any]:
    """A note as `kb-bridge export` writes it."""
    return {"id": number, "collection": collection, "title": f"note {number}", "tags": ["import"], "version": 1,
            "source_path": None, "doc_type": "note", "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z", "sha256": hashlib.sha256(text.encode()).hexdigest(), "text": text}


def file_record(collection: str, number: int, data: bytes, text: str) -> dict[str, Any]:
    """An HTML file as `kb-bridge export` writes it, its bytes in base64."""
    return {"id": number, "collection": collection, "title": f"page{number}.html", "tags": [], "version": 1,
            "source_path": f"pages/page{number}.html", "doc_type": "html", "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z", "sha256": hashlib.sha256(data).hexdigest(), "text": text,
            "filename": f"page{number}.html", "content_type": "text/html",
            "original_base64": base64.b64encode(data).decode("ascii")}


def test_bad_records_are_reported_by_line_and_skipped_and_the_rest_imported(engine: Service, tmp_path: Path) -> None:
    collection = f"bad-records-{SUFFIX}"
    good = [note_record(collection, n, f"Sandwich terns dive for sand eels, record {n} {SUFFIX}.") for n in (1, 7)]
    lines = [
        json.dumps(good[0]),
        json.dumps({**note_record(collection, 2, "two"), "collection": 7}),  # a number where a string belongs
        "this line is not JSON",
        json.dumps({k: v for k, v in note_record(collection, 4, "four").items() if k != "text"}),  # no text
        json.dumps({**file_record(collection, 5, b"<p>x</p>", "x"), "original_base64": 12345}),
        json.dumps({**note_record(collection, 6, "six"), "title": ["not", "a", "string"]}),
        json.dumps(good[1]),
    ]
    export_file = tmp_path / "bad.jsonl"
    export_file.write_text("\n".join(lines) + "\n")

    imported = kb(engine, "import", str(export_file), "--json")
    assert "Traceback" not in imported.stderr, imported.stderr
    report = json.loads(imported.stdout)
    assert imported.returncode == 1  # not everything was imported
    assert report["added"] == 2 and report["skipped"] == 0
    reasons = {failure["line"]: failure["reason"] for failure in report["failed"]}
    assert set(reasons) == {2, 3, 4, 5, 6}, reasons
    assert reasons[2].startswith("collection:") and "not JSON" in reasons[3] and reasons[4].startswith("text:")
    assert reasons[5].startswith("original_base64:") and reasons[6].startswith("title:")
    stored = engine_get(engine, "/documents", tag=f"collection:{collection}")["documents"]
    assert sorted(doc["title"] for doc in stored) == ["note 1", "note 7"]

    plain = kb(engine, "import", str(export_file))
    assert plain.returncode == 1 and "Imported 0, skipped 2 already stored, failed 5." in plain.stdout
    assert "  line 2: collection: must be a string" in plain.stdout


@pytest.fixture(scope="module")
def one_at_a_time_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """An engine that embeds one chunk per model call with one copy of the model. Its worker claims bulk
    jobs only while fewer than 2 windows of 32 calls (64 chunks) wait for the model, so a backlog of a few
    hundred chunks keeps the jobs queued after it waiting for a while (about 30 s on 2 busy cores)."""
    tmp = tmp_path_factory.mktemp("one-at-a-time-engine")
    service = start_engine(tmp, tmp / "data", env={"KB_API_KEY": ENGINE_KEY, "KB_ENGINE_EMBED_BATCH": "1",
                                                   "KB_ENGINE_EMBED_WORKERS": "1"})
    yield service
    service.stop()


def test_a_rerun_after_ctrl_c_while_the_jobs_are_queued_adds_each_record_once(
        one_at_a_time_engine: Service, tmp_path: Path) -> None:
    engine = one_at_a_time_engine
    collection = f"rerun-{SUFFIX}"
    records = [note_record(collection, n, f"Oystercatchers probe the mud, field note {n} {SUFFIX}.") for n in range(12)]
    records += [file_record(collection, n, f"<h1>Page {n}</h1><p>Redshank counts {n} {SUFFIX}</p>".encode(), "")
                for n in (100, 101)]
    export_file = tmp_path / "rerun.jsonl"
    export_file.write_text("".join(json.dumps(record) + "\n" for record in records))
    env = clean_env({"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY})
    command = [sys.executable, "-m", "kb_bridge", "import", str(export_file)]

    # A real backlog: one large bulk note (about 900 chunks) queued first. The worker takes the oldest bulk job
    # first and claims no more while its chunks wait for the model, so the import's jobs wait behind it (450
    # chunks were done before the rerun had sent its records, once the model ran in int8 at twice the speed).
    backlog = " ".join(f"Backlog paragraph {n}: waders feed on the mudflats at low tide." for n in range(12_000))
    blocker = requests.post(engine.url + "/api/v1/jobs", headers=HEADERS, timeout=60, json={
        "text": backlog, "tags": [f"collection:backlog-{SUFFIX}"], "priority": "bulk"}).json()
    wait_until(lambda: engine_get(engine, f"/jobs/{blocker['id']}")["status"] == "running", 60, what="the backlog")
    queued_before = engine_get(engine, "/status")["queue"]["queued"]

    first = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: engine_get(engine, "/status")["queue"]["queued"] >= queued_before + len(records), 120,
               what="the import's jobs queued")
    first.send_signal(signal.SIGINT)
    _, first_err = first.communicate(timeout=60)

    rerun = subprocess.Popen([*command, "--json"], env=env, cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    assert rerun.stderr is not None
    for line in rerun.stderr:  # the rerun says when it has sent every record
        if "waiting until" in line:
            break
    stored_when_sent_again = len(documents_in(engine, collection))
    rerun_out, rerun_err = rerun.communicate(timeout=900)

    stored = documents_in(engine, collection)
    assert sorted(doc["title"] for doc in stored) == sorted(record["title"] for record in records)  # once each
    # The rerun ran while the first run's jobs were still waiting (else a document of each would be stored).
    assert stored_when_sent_again < len(records)
    assert first.returncode == 130 and "Traceback" not in first_err, first_err
    assert "run the same command again" in first_err
    assert rerun.returncode == 0, rerun_err
    report = json.loads(rerun_out)
    assert report["added"] + report["skipped"] == len(records) and report["failed"] == []
    again = kb(engine, "import", str(export_file), "--json")
    assert json.loads(again.stdout) == {"added": 0, "skipped": len(records), "failed": []}


def test_a_rerun_retries_a_failed_record_and_brings_back_a_deleted_one(engine: Service, tmp_path: Path) -> None:
    collection = f"rerun-failed-{SUFFIX}"
    broken = {**file_record(collection, 1, b"%PDF-1.4 not really a pdf", ""), "doc_type": "pdf",
              "filename": "broken.pdf", "title": "broken.pdf"}
    note = note_record(collection, 2, f"Whimbrels pass through in May {SUFFIX}.")
    export_file = tmp_path / "retry.jsonl"
    export_file.write_text(json.dumps(broken) + "\n" + json.dumps(note) + "\n")

    first = json.loads(kb(engine, "import", str(export_file), "--json").stdout)
    assert first["added"] == 1 and [f["line"] for f in first["failed"]] == [1]
    # Within the engine's 24 h the record's key answers its failed job; the rerun tries it again as a new job.
    second = json.loads(kb(engine, "import", str(export_file), "--json").stdout)
    assert second["skipped"] == 1 and [f["line"] for f in second["failed"]] == [1]
    assert first["failed"][0]["reason"] != second["failed"][0]["reason"]  # "job N failed": another job
    [stored] = documents_in(engine, collection)
    assert kb(engine, "delete", str(stored["id"])).returncode == 0
    third = json.loads(kb(engine, "import", str(export_file), "--json").stdout)
    assert third["added"] == 1  # the key's job is done, but its document is gone: stored again
    assert [doc["title"] for doc in documents_in(engine, collection)] == ["note 2"]


def documents_in(engine: Service, collection: str) -> list[dict[str, Any]]:
    return list(engine_get(engine, "/documents", tag=f"collection:{collection}", limit=500)["documents"])


MiB = 1024 * 1024


# Starts the command and prints its exit status and peak RSS (KiB). A child's ru_maxrss is never below the
# resident size of the process that started it (Linux carries the old image's high-water mark across exec),
# so the command is started from this small launcher, not from pytest (hundreds of MiB).
LAUNCHER = """
import os, subprocess, sys
out, err, *command = sys.argv[1:]
with open(out, "w") as stdout, open(err, "w") as stderr:
    child = subprocess.Popen(command, stdout=stdout, stderr=stderr)
    _, status, usage = os.wait4(child.pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def peak_rss_of_import(engine: Service, export_file: Path, tmp_path: Path) -> int:
    """The peak resident memory in bytes of `kb-bridge import FILE`, run as a user runs it."""
    env = clean_env({"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY})
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    launched = subprocess.run([sys.executable, "-c", LAUNCHER, str(out), str(err), sys.executable, "-m", "kb_bridge",
                               "import", str(export_file)], env=env, cwd=REPO, capture_output=True, text=True,
                              timeout=900)
    assert launched.returncode == 0, launched.stderr
    code, peak_kib = (int(field) for field in launched.stdout.split())
    assert code == 0, err.read_text()
    assert "Imported" in out.read_text()
    return peak_kib * 1024


def write_pages(path: Path, collection: str, first: int, count: int, size: int) -> None:
    """`count` HTML pages of `size` bytes each: one line of visible text, the rest an HTML comment (so the
    engine stores the whole file and indexes one short chunk)."""
    with open(path, "w") as out:
        for number in range(first, first + count):
            head = f"<html><body><p>Import memory page {number} {SUFFIX}</p><!-- ".encode()
            tail = b" --></body></html>"
            data = head + b"x" * (size - len(head) - len(tail)) + tail
            out.write(json.dumps(file_record(collection, number, data, f"Import memory page {number}")) + "\n")


@pytest.fixture(scope="module")
def text_only_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """An engine without the model: the memory test measures the import, not the embedding."""
    tmp = tmp_path_factory.mktemp("text-only-engine")
    service = start_engine(tmp, tmp / "data", env={"KB_API_KEY": ENGINE_KEY, "KB_ENGINE_EMBEDDER": "none"})
    yield service
    service.stop()


def test_import_streams_memory_does_not_grow_with_the_file(text_only_engine: Service, tmp_path: Path) -> None:
    collection = f"memory-{SUFFIX}"
    one, fifty = tmp_path / "one.jsonl", tmp_path / "fifty.jsonl"
    write_pages(one, collection, 0, 1, 8 * MiB)
    write_pages(fifty, collection, 1, 50, 8 * MiB)
    (tmp_path / "one").mkdir()
    (tmp_path / "fifty").mkdir()
    peak_one = peak_rss_of_import(text_only_engine, one, tmp_path / "one")
    peak_fifty = peak_rss_of_import(text_only_engine, fifty, tmp_path / "fifty")
    print(f"import peak RSS: 1 x 8 MiB {peak_one / MiB:.0f} MiB, 50 x 8 MiB {peak_fifty / MiB:.0f} MiB")
    assert peak_fifty <= peak_one + 64 * MiB, (peak_one / MiB, peak_fifty / MiB)
    assert len(documents_in(text_only_engine, collection)) == 51


def test_export_with_history_and_import_bring_a_notes_versions_back(tmp_path: Path) -> None:
    engines = [start_engine(tmp_path, tmp_path / name, env={"KB_API_KEY": ENGINE_KEY, "KB_ENGINE_EMBEDDER": "none"})
               for name in ("history-source", "history-target")]
    try:
        source, target = engines
        added = kb(source, "add", "Plovers run then stop.", "--collection", "waders", "--json")
        document_id = json.loads(added.stdout)["document_id"]
        for text, who in (("Plovers run, stop, and peck.", "alice"), ("Plovers run, stop, peck, repeat.", "bob")):
            assert requests.patch(f"{source.url}/api/v1/notes/{document_id}", headers=HEADERS, timeout=30,
                                  json={"text": text, "changed_by": who}).status_code == 200
        exported = tmp_path / "history.jsonl"
        assert kb(source, "export", str(exported), "--history").returncode == 0
        record = json.loads(exported.read_text())
        assert [v["text"] for v in record["history"]] == ["Plovers run then stop.", "Plovers run, stop, and peck."]
        without = tmp_path / "plain.jsonl"
        assert kb(source, "export", str(without)).returncode == 0 and "history" not in json.loads(without.read_text())

        imported = kb(target, "import", str(exported), "--json")
        assert imported.returncode == 0 and json.loads(imported.stdout)["added"] == 1, imported.stdout
        new_id = documents_in(target, "waders")[0]["id"]
        versions = engine_get(target, f"/documents/{new_id}/versions")["versions"]
        assert [(v["version"], v["changed_by"]) for v in versions] == [(3, None), (2, "alice"), (1, "local")]
        assert engine_get(target, f"/documents/{new_id}", version=1)["content"] == "Plovers run then stop."
        assert engine_get(target, f"/documents/{new_id}")["content"] == "Plovers run, stop, peck, repeat."
    finally:
        for engine in engines:
            engine.stop()


def test_an_imported_note_refuses_its_text_again_as_an_added_one_does(text_only_engine: Service,
                                                                     tmp_path: Path) -> None:
    """Memory restored from an export keeps kb_addnote's promise: the same text is not added to its collection
    again (an imported note held no duplicate key, so an agent's add made a second note). Two records sharing a
    text both come back, as every record does."""
    collection = f"dedupe-{SUFFIX}"
    text = f"Avocets sweep their bills through the mud {SUFFIX}."
    export_file = tmp_path / "dupes.jsonl"
    export_file.write_text("".join(json.dumps(note_record(collection, n, text)) + "\n" for n in (1, 2)))
    imported = kb(text_only_engine, "import", str(export_file), "--json")
    assert imported.returncode == 0 and json.loads(imported.stdout)["added"] == 2, imported.stdout + imported.stderr
    stored = {doc["id"] for doc in documents_in(text_only_engine, collection)}
    assert len(stored) == 2

    again = kb(text_only_engine, "add", f"  {text}\n", "--collection", collection, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["duplicate_of"] in stored
    assert {doc["id"] for doc in documents_in(text_only_engine, collection)} == stored
    elsewhere = kb(text_only_engine, "add", text, "--collection", f"{collection}-b", "--json")
    assert json.loads(elsewhere.stdout)["duplicate_of"] is None  # another collection's text never blocks


def test_a_rerun_gives_a_note_stored_without_its_history_the_history(text_only_engine: Service, tmp_path: Path) -> None:
    """A run stopped while a note's job was queued (or whose history PUT failed) leaves the note stored without
    its history; the rerun, which finds the note stored, restores it, or says why it cannot."""
    engine = text_only_engine
    collection = f"history-rerun-{SUFFIX}"
    history = [{"version": 1, "title": "kettle", "text": "Kettle v1: descale yearly", "tags": [f"collection:{collection}"],
                "updated_at": "2025-01-01T00:00:00Z", "changed_by": "alice"},
               {"version": 2, "title": "kettle", "text": "Kettle v2: descale weekly", "tags": [f"collection:{collection}"],
                "updated_at": "2025-06-01T00:00:00Z", "changed_by": "bob"}]
    kettle = {**note_record(collection, 1, f"Kettle v3: descale monthly {SUFFIX}"), "title": "kettle"}
    kept = {**note_record(collection, 2, f"Teapot v3: warm the pot {SUFFIX}"), "title": "teapot"}
    # What the interrupted run left: each note stored (its record's job done), its history not.
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps(kettle) + "\n" + json.dumps(kept) + "\n")
    assert kb(engine, "import", str(bare)).returncode == 0
    by_title = {doc["title"]: doc["id"] for doc in documents_in(engine, collection)}
    # The teapot is changed since (a tag added keeps the version it replaces): its own history must stay.
    assert requests.post(f"{engine.url}/api/v1/documents/{by_title['teapot']}/tags", headers=HEADERS, timeout=30,
                         json={"tags": ["kitchen"]}).status_code == 200
    full = tmp_path / "full.jsonl"
    full.write_text(json.dumps({**kettle, "history": history}) + "\n" + json.dumps({**kept, "history": history}) + "\n")

    rerun = kb(engine, "import", str(full), "--json")
    report = json.loads(rerun.stdout)
    assert rerun.returncode == 1, rerun.stderr  # the teapot's history could not be restored: said, not hidden
    assert report["added"] == 0 and report["skipped"] == 2
    [failure] = report["failed"]
    assert failure["line"] == 2 and "changed since" in failure["reason"], failure
    versions = engine_get(engine, f"/documents/{by_title['kettle']}/versions")["versions"]
    assert [(v["version"], v["changed_by"]) for v in versions][1:] == [(2, "bob"), (1, "alice")]
    assert engine_get(engine, f"/documents/{by_title['kettle']}", version=1)["content"] == "Kettle v1: descale yearly"
    teapot = engine_get(engine, f"/documents/{by_title['teapot']}/versions")["versions"]
    assert [v["version"] for v in teapot] == [2, 1]  # its own versions, untouched

    again = kb(engine, "import", str(full), "--json")  # the kettle's history is there now: nothing more to do
    assert [f["line"] for f in json.loads(again.stdout)["failed"]] == [2]
    assert len(engine_get(engine, f"/documents/{by_title['kettle']}/versions")["versions"]) == 3


def test_export_keeps_every_document_while_others_are_deleted_or_updated(text_only_engine: Service,
                                                                         tmp_path: Path) -> None:
    """Export listed by offset over a newest-first listing: one document deleted after the first page moved
    every later one up a place, and one still stored was missing from the file (exit 0); one updated moved
    above where the listing had reached and was missing too."""
    engine = text_only_engine
    collection = f"export-churn-{SUFFIX}"
    for number in range(150):
        assert requests.post(f"{engine.url}/api/v1/jobs", headers=HEADERS, timeout=30, json={
            "text": f"Export churn note {number} {SUFFIX}", "tags": [f"collection:{collection}"]}).status_code == 202
    wait_until(lambda: engine_get(engine, "/documents", tag=f"collection:{collection}", limit=1)["total"] == 150, 120,
               what="150 notes stored")
    env = clean_env({"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY})

    def export_while(change: Callable[[], None]) -> set[int]:
        """The ids exported while `change` ran right after the first page was listed."""
        target = tmp_path / "churn.jsonl"
        export = subprocess.Popen([sys.executable, "-m", "kb_bridge", "export", str(target), "--collection",
                                   collection], env=env, cwd=REPO, stderr=subprocess.PIPE, text=True)
        assert export.stderr is not None
        export.stderr.readline()  # "export: 0/150 doc": the first page is listed
        change()
        rest = export.stderr.read()
        assert export.wait(timeout=300) == 0, rest
        return {json.loads(line)["id"] for line in target.read_text().splitlines()}

    def stored() -> set[int]:
        return {doc["id"] for doc in documents_in(engine, collection)}

    newest = documents_in(engine, collection)[0]["id"]  # on the first page
    exported = export_while(lambda: requests.delete(f"{engine.url}/api/v1/documents/{newest}", headers=HEADERS,
                                                    timeout=30).raise_for_status())
    assert stored() - exported == set() and len(stored()) == 149

    oldest = documents_in(engine, collection)[-1]["id"]  # on the second page
    exported = export_while(lambda: requests.patch(f"{engine.url}/api/v1/notes/{oldest}", headers=HEADERS, timeout=30,
                                                   json={"text": f"Export churn, updated {SUFFIX}"}).raise_for_status())
    assert stored() - exported == set() and oldest in exported
