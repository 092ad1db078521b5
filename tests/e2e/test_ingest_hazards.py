"""`kb-bridge ingest` over folders that misbehave: a file name that is not UTF-8, a file that grows or shrinks
between its listing and its upload, a folder that cannot be read for the moment (and --prune), a folder swapped
for a symbolic link before a file in it is read, files deeper than PATH_MAX. A real CLI process against a real
local engine (full-text only: nothing here needs the model); where the hazard must strike between two steps of
one run, the process runs the CLI behind a small harness (HARNESS) that causes it at that moment.

Each test loads into a collection of its own and keeps its state file in its own temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import requests

from kb_bridge.testing.processes import REPO, Service, clean_env, start_engine, wait_until

KEY = "ingest-hazards-key-0123456789abcdef"
DEADLINE = 120  # seconds: a run that outlives it is stuck, not slow

# Runs `kb-bridge ingest ARGS` after making Ingestion._upload do `HAZARD` (grow, shrink, swap) to the file first,
# as a writer or an attacker acting between the plan (which read the file) and the upload would.
HARNESS = """
import os, shutil, sys
from pathlib import Path
from kb_bridge.cli import ingest_run, main

hazard, victim, outside = sys.argv[1], sys.argv[2], sys.argv[3]
original = ingest_run.Ingestion._upload

def upload(self, step):
    path = step.candidate.path
    if path.name == victim:
        if hazard == "grow":
            path.write_text(path.read_text() + " and a few words more")
        elif hazard == "shrink":
            path.write_text("short")
        elif hazard == "swap":  # the file's folder becomes a link to a folder outside the root
            shutil.rmtree(path.parent)
            os.symlink(outside, path.parent)
    return original(self, step)

ingest_run.Ingestion._upload = upload
sys.exit(main(["ingest", *sys.argv[4:]]))
"""


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("ingest-hazards-engine")
    service = start_engine(tmp, tmp / "data", env={"KB_API_KEY": KEY, "KB_ENGINE_EMBEDDER": "none"})
    yield service
    service.stop()


def _env(engine: Service) -> dict[str, str]:
    return clean_env({"KB_ENGINE_URL": engine.url, "KB_API_KEY": KEY, "KB_ENGINE_RETRIES": "2"})


def ingest(engine: Service, tmp: Path, *args: str, wrapper: Sequence[str] = (),
           harness: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """The CLI, under `wrapper` (a command it runs under) or behind HARNESS (`harness`: its hazard, file and
    folder outside), with a state file in `tmp`."""
    program = [sys.executable, "-c", HARNESS, *harness] if harness else [sys.executable, "-m", "kb_bridge", "ingest"]
    return subprocess.run([*wrapper, *program, *args, "--state", str(tmp / "state.json")], env=_env(engine),
                          cwd=REPO, capture_output=True, text=True, timeout=DEADLINE)


def ingest_json(engine: Service, tmp: Path, *args: str, wrapper: Sequence[str] = (),
                harness: Sequence[str] = ()) -> tuple[int, dict[str, Any]]:
    result = ingest(engine, tmp, *args, "--json", wrapper=wrapper, harness=harness)
    assert result.stdout and "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout)


def api(engine: Service, path: str, **params: Any) -> Any:
    response = requests.get(f"{engine.url}/api/v1{path}", headers={"Authorization": f"Bearer {KEY}"}, timeout=30,
                            params=params)
    response.raise_for_status()
    return response.json()


def documents(engine: Service, collection: str) -> dict[str, dict[str, Any]]:
    found = api(engine, "/documents", tag=f"collection:{collection}", limit=500)["documents"]
    return {doc["source_path"]: doc for doc in found}


def content(engine: Service, document: dict[str, Any]) -> str:
    return str(api(engine, f"/documents/{document['id']}")["content"])


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_name_that_is_not_utf8_is_reported_and_the_other_files_load(engine: Service, tmp_path: Path) -> None:
    folder = tmp_path / "names"
    write(folder / "a.txt", "the avocet, before the bad name")
    write(folder / "z.txt", "the zitting cisticola, after it")
    with open(os.path.join(os.fsencode(folder), b"bad\xff\xfename.txt"), "w") as handle:
        handle.write("a file whose name is Latin-1, not UTF-8")

    for run in (1, 2):  # a rerun reports it again (it is never stored) and still does not stop
        code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "names")
        assert code == 1 and report["interrupted"] == 0, report
        assert (report["added"], report["skipped"], report["failed"]) == ((2, 0, 1) if run == 1 else (0, 2, 1)), report
        [failure] = report["failures"]
        assert failure["source_path"] == "names/bad\\xff\\xfename.txt" and "not UTF-8" in failure["reason"], failure
    assert set(documents(engine, "names")) == {"names/a.txt", "names/z.txt"}

    plain = ingest(engine, tmp_path, str(folder), "--collection", "names")
    assert plain.returncode == 1 and "Traceback" not in plain.stderr, plain.stderr
    assert "failed: names/bad\\xff\\xfename.txt: its name is not UTF-8" in plain.stdout, plain.stdout


def test_watch_reports_a_name_that_is_not_utf8_and_keeps_watching(engine: Service, tmp_path: Path) -> None:
    folder = tmp_path / "watched"
    write(folder / "a.txt", "the avocet, watched")
    with open(os.path.join(os.fsencode(folder), b"bad\xffname.txt"), "w") as handle:
        handle.write("a file whose name is Latin-1, not UTF-8")
    log = tmp_path / "watch.out"
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, "-m", "kb_bridge", "ingest", "--watch", str(folder), "--collection",
                                    "watched", "--state", str(tmp_path / "state.json")], env=_env(engine), cwd=REPO,
                                   stdout=out, stderr=subprocess.PIPE, text=True)
    try:
        def said(text: str) -> bool:
            assert process.poll() is None, process.communicate()
            return text in log.read_text()

        wait_until(lambda: said("failed watched/bad\\xffname.txt: its name is not UTF-8"), DEADLINE,
                   what="the first pass")
        write(folder / "b.txt", "the bittern, written while watched")
        wait_until(lambda: set(documents(engine, "watched")) == {"watched/a.txt", "watched/b.txt"}, DEADLINE,
                   what="the file written since")
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0 and "Traceback" not in err, err


@pytest.mark.parametrize("hazard", ["grow", "shrink"])
def test_a_file_that_changes_size_before_its_upload_fails_and_the_next_run_loads_it(
        engine: Service, tmp_path: Path, hazard: str) -> None:
    collection = f"changing-{hazard}"
    folder = tmp_path / collection  # source paths of its own: the engine keeps upload keys across collections
    write(folder / "a.txt", "the changing note about the bittern " * 20)
    write(folder / "b.txt", "a steady note about the bearded tit, uploaded after it")

    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", collection,
                               harness=[hazard, "a.txt", "-"])
    assert code == 1 and report["interrupted"] == 0, report
    assert (report["added"], report["failed"]) == (1, 1), report
    assert report["failures"][0]["source_path"] == f"{collection}/a.txt", report
    assert "the file changed while it was read" in report["failures"][0]["reason"], report
    assert set(documents(engine, collection)) == {f"{collection}/b.txt"}

    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", collection)
    assert code == 0 and (report["added"], report["skipped"]) == (1, 1), report
    assert content(engine, documents(engine, collection)[f"{collection}/a.txt"]) == (folder / "a.txt").read_text()


def test_prune_keeps_the_documents_of_a_folder_it_cannot_read(engine: Service, tmp_path: Path) -> None:
    folder = tmp_path / "tree"
    write(folder / "top.md", "the top note about the nightjar")
    write(folder / "locked" / "inner.md", "the inner note about the woodlark")
    write(folder / "listed" / "hidden.md", "a note in a folder that lists but cannot be entered")
    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "locked", "--prune")
    assert code == 0 and report["added"] == 3, report

    # Root reads any folder: the CLI then runs without the capabilities that let it (setpriv, util-linux).
    wrapper = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    if wrapper and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: every folder is readable")
    (folder / "locked").chmod(0)  # cannot be listed
    (folder / "listed").chmod(0o444)  # its names can be listed, but nothing in it can be reached
    try:
        for extra in (["--dry-run"], []):
            code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "locked", "--prune", *extra,
                                       wrapper=wrapper)
            failures = {failure["source_path"]: failure["reason"] for failure in report["failures"]}
            assert code == 1 and set(failures) == {"tree/locked", "tree/listed/hidden.md"}, report
            assert "Permission denied" in failures["tree/locked"], failures
            assert "Permission denied" in failures["tree/listed/hidden.md"], failures
            assert report["removed"] == 0 and report.get("plan", {}).get("remove", []) == [], report
        plain = ingest(engine, tmp_path, str(folder), "--collection", "locked", "--prune", wrapper=wrapper)
        assert "failed: tree/locked: cannot list the folder: Permission denied" in plain.stdout, plain.stdout
    finally:
        (folder / "locked").chmod(0o755)
        (folder / "listed").chmod(0o755)
    assert set(documents(engine, "locked")) == {"tree/top.md", "tree/locked/inner.md", "tree/listed/hidden.md"}

    shutil.rmtree(folder / "locked")  # really gone now: pruned
    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "locked", "--prune")
    assert code == 0 and report["removed"] == 1, report
    assert set(documents(engine, "locked")) == {"tree/top.md", "tree/listed/hidden.md"}


def test_a_folder_swapped_for_a_link_outside_before_the_upload_is_not_followed(
        engine: Service, tmp_path: Path) -> None:
    folder = tmp_path / "swap"
    write(folder / "a.md", "the first note about the stonechat")
    write(folder / "sub" / "s.md", "a harmless note about the whinchat")
    write(folder / "z.md", "the last note about the wheatear")
    outside = tmp_path / "outside"
    harmless = (folder / "sub" / "s.md").read_text()
    write(outside / "s.md", "SECRET".ljust(len(harmless), "!"))  # as long: the upload's size check cannot tell

    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "swap",
                               harness=["swap", "s.md", str(outside)])
    assert code == 1 and (report["added"], report["failed"]) == (2, 1), report
    assert report["failures"][0]["source_path"] == "swap/sub/s.md", report
    assert "symbolic link" in report["failures"][0]["reason"], report
    stored = documents(engine, "swap")
    assert set(stored) == {"swap/a.md", "swap/z.md"}
    assert all("SECRET" not in content(engine, document) for document in stored.values())


def _deep_folder(base: Path, levels: int) -> list[str]:
    """`levels` folders of 100-character names below `base` (about 100 bytes of path each), made one below the
    other through folder descriptors (a path that long cannot be given to mkdir); their names, in order."""
    names = [f"{level:03d}" + "d" * 97 for level in range(levels)]
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names:
            os.mkdir(name, dir_fd=fd)
            below = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
        with os.fdopen(os.open("deep.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as handle:
            handle.write("the deepest note, about the water rail")
    finally:
        os.close(fd)
    return names


def _unlink_deep(base: Path, names: Sequence[str], file: str) -> None:
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names:
            below = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
        os.unlink(file, dir_fd=fd)
    finally:
        os.close(fd)


def test_files_deeper_than_path_max_are_loaded_and_pruned_only_when_gone(engine: Service, tmp_path: Path) -> None:
    # A root 400 bytes down: the file's full path passes PATH_MAX (4,096) while its source_path stays within
    # the engine's 4,096 characters.
    folder = tmp_path / ("r" * 200) / ("s" * 200) / "deep"
    write(folder / "top.txt", "the top note about the spotted crake")
    names = _deep_folder(folder, 38)
    deep = "deep/" + "/".join(names) + "/deep.txt"
    assert len(os.fsencode(folder)) + len(deep) > 4096 >= len(deep)

    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "deep", "--prune")
    assert code == 0 and report["added"] == 2, report
    stored = documents(engine, "deep")
    assert set(stored) == {"deep/top.txt", deep}
    assert content(engine, stored[deep]) == "the deepest note, about the water rail"

    (tmp_path / "state.json").unlink()  # the rerun asks the engine and checks each document's file
    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "deep", "--prune")
    assert code == 0 and (report["skipped"], report["removed"]) == (2, 0), report

    # A file left out by --glob keeps its document: it is not gone, however long its path.
    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "deep", "--prune", "--glob", "top.txt")
    assert code == 0 and (report["skipped"], report["removed"]) == (1, 0), report

    _unlink_deep(folder, names, "deep.txt")
    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "deep", "--prune")
    assert code == 0 and (report["skipped"], report["removed"]) == (1, 1), report
    assert set(documents(engine, "deep")) == {"deep/top.txt"}
