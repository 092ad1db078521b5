"""`kb-bridge ingest` keeping folders in sync (issue 37): distinct prefixes, collisions, --prune, --dry-run,
moves without re-embedding, the state file, and --watch. A real CLI process against a real local engine.

Each test loads into a collection of its own and keeps its state file in its own temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from kb_bridge.testing.processes import REPO, Service, clean_env, start_engine, wait_until

KEY = "ingest-sync-key-0123456789abcdef"
# The target is 2 s from the end of a write to the change being searchable; the tests allow more, since the
# machine is shared with other test runs, and print what they measured.
WATCH_SECONDS = 6.0


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("ingest-sync-engine")
    service = start_engine(tmp, tmp / "data", env={"KB_API_KEY": KEY, "KB_ENGINE_EMBED_BATCH": "4"})
    yield service
    service.stop()


def _env(engine: Service) -> dict[str, str]:
    return clean_env({"KB_ENGINE_URL": engine.url, "KB_API_KEY": KEY, "KB_ENGINE_RETRIES": "2"})


def ingest(engine: Service, tmp: Path, *args: str, **options: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kb_bridge", "ingest", *args, "--state", str(tmp / "state.json")],
                          env=_env(engine), cwd=REPO, capture_output=True, text=True, timeout=300, **options)


def ingest_json(engine: Service, tmp: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = ingest(engine, tmp, *args, "--json")
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout)


def api(engine: Service, method: str, path: str, **options: Any) -> Any:
    response = requests.request(method, f"{engine.url}/api/v1{path}", headers={"Authorization": f"Bearer {KEY}"},
                                timeout=30, **options)
    response.raise_for_status()
    return response.json()


def documents(engine: Service, collection: str) -> dict[str, dict[str, Any]]:
    found = api(engine, "GET", "/documents", params={"tag": f"collection:{collection}", "limit": 500})["documents"]
    return {doc["source_path"]: doc for doc in found}


def fts(engine: Service, query: str, collection: str) -> list[dict[str, Any]]:
    return list(api(engine, "POST", "/search", json={"query": query, "mode": "fts",
                                                       "tags": [f"collection:{collection}"]})["results"])


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_two_same_named_roots_keep_all_files(engine: Service, tmp_path: Path) -> None:
    valgrind, xslt = tmp_path / "doc" / "valgrind" / "html", tmp_path / "doc" / "libxslt" / "html"
    for root, word in ((valgrind, "memcheck"), (xslt, "stylesheet")):
        write(root / "index.html", f"<html><body><p>{word} index page</p></body></html>")
        write(root / "FAQ.html", f"<html><body><p>{word} questions</p></body></html>")
    write(xslt / "only.html", "<html><body><p>stylesheet only</p></body></html>")

    code, report = ingest_json(engine, tmp_path, str(valgrind), str(xslt), "--collection", "twins")
    assert code == 0 and report["added"] == 5, report
    assert set(documents(engine, "twins")) == {
        "valgrind/html/index.html", "valgrind/html/FAQ.html",
        "libxslt/html/index.html", "libxslt/html/FAQ.html", "libxslt/html/only.html"}

    # One at a time: a single folder keeps its name as prefix (as before), so the second one, also `html`,
    # would land on the first one's documents: it is refused, and nothing of the first is replaced.
    code, report = ingest_json(engine, tmp_path, str(valgrind), "--collection", "solo")
    assert code == 0 and report["added"] == 2 and set(documents(engine, "solo")) == {"html/index.html", "html/FAQ.html"}
    first = documents(engine, "solo")
    refused = ingest(engine, tmp_path, str(xslt), "--collection", "solo", "--prune")
    assert refused.returncode == 2 and "another folder" in refused.stderr and "--prefix" in refused.stderr, refused.stderr
    assert documents(engine, "solo") == first
    code, report = ingest_json(engine, tmp_path, str(xslt), "--collection", "solo", "--prefix", "xslt", "--prune")
    assert code == 0 and report["added"] == 3 and report["removed"] == 0, report
    assert set(documents(engine, "solo")) == {"html/index.html", "html/FAQ.html", "xslt/index.html", "xslt/FAQ.html",
                                              "xslt/only.html"}
    assert fts(engine, "memcheck", "solo") and fts(engine, "stylesheet", "solo")


def test_a_collision_in_one_run_writes_nothing_and_names_both_files(engine: Service, tmp_path: Path) -> None:
    one, two = write(tmp_path / "one" / "notes.md", "first grebe"), write(tmp_path / "two" / "notes.md", "second grebe")
    write(tmp_path / "one" / "other.md", "a file of its own")
    result = ingest(engine, tmp_path, str(one.parent), str(two.parent), "--prefix", "same", "--prefix", "same",
                    "--collection", "collide")
    assert result.returncode == 2, result.stderr
    assert str(one) in result.stderr and str(two) in result.stderr and "same/notes.md" in result.stderr
    assert "nothing was written" in result.stderr and "Traceback" not in result.stderr
    assert documents(engine, "collide") == {}


def test_dry_run_lists_the_plan_and_changes_nothing_then_prune_applies_it(engine: Service, tmp_path: Path) -> None:
    folder = tmp_path / "field"
    write(folder / "keep.md", "kept: the ruff display")
    write(folder / "change.md", "before: the dunlin flock")
    write(folder / "gone.md", "deleted: the sanderling note")
    write(folder / "old-name.md", "renamed: the whimbrel call")
    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "field")
    assert code == 0 and report["added"] == 4, report
    before = documents(engine, "field")
    jobs_before = api(engine, "GET", "/status")["queue"]

    write(folder / "change.md", "after: the knot flock")
    (folder / "gone.md").unlink()
    (folder / "old-name.md").rename(folder / "new-name.md")
    write(folder / "new.md", "added: the turnstone")
    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "field", "--prune", "--dry-run")
    assert code == 0, report
    assert report["dry_run"] and report["plan"] == {
        "add": ["field/new.md"], "update": ["field/change.md"], "remove": ["field/gone.md"],
        "move": [{"from": "field/old-name.md", "to": "field/new-name.md"}], "skip": 1}
    assert documents(engine, "field") == before and api(engine, "GET", "/status")["queue"] == jobs_before
    text = ingest(engine, tmp_path, str(folder), "--collection", "field", "--prune", "--dry-run")
    assert "would move: field/old-name.md -> field/new-name.md" in text.stdout and "would remove: field/gone.md" in text.stdout
    assert "nothing was changed" in text.stdout and documents(engine, "field") == before

    without = ingest(engine, tmp_path, str(folder), "--collection", "field")  # no --prune: the gone file's document stays
    assert without.returncode == 0 and "1 document(s) whose file is gone are kept" in without.stdout, without.stdout
    assert "field/gone.md" in documents(engine, "field")
    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "field", "--prune")
    assert code == 0 and (report["removed"], report["skipped"]) == (1, 4), report
    after = documents(engine, "field")
    assert set(after) == {"field/keep.md", "field/change.md", "field/new-name.md", "field/new.md"}
    assert after["field/keep.md"]["id"] == before["field/keep.md"]["id"]
    assert after["field/new-name.md"]["id"] == before["field/old-name.md"]["id"]
    assert not fts(engine, "sanderling", "field") and fts(engine, "knot", "field") and not fts(engine, "dunlin", "field")


def test_a_renamed_file_keeps_its_document_and_is_not_embedded_again(engine: Service, tmp_path: Path) -> None:
    folder = tmp_path / "survey"
    write(folder / "draft.md", "# Survey\n\n" + "The godwits feed on the mudflat at low tide. " * 60)
    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "renames")
    assert code == 0 and report["added"] == 1
    stored = documents(engine, "renames")["survey/draft.md"]
    detail = api(engine, "GET", f"/documents/{stored['id']}")
    assert len(detail["chunks"]) > 1
    queue = api(engine, "GET", "/status")["queue"]

    (folder / "2026").mkdir()
    (folder / "draft.md").rename(folder / "2026" / "final.md")
    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "renames")
    assert code == 0 and (report["moved"], report["added"], report["removed"]) == (1, 0, 0), report
    assert report["moves"] == [{"from": "survey/draft.md", "to": "survey/2026/final.md"}]
    moved = documents(engine, "renames")
    assert list(moved) == ["survey/2026/final.md"]
    after = api(engine, "GET", f"/documents/{stored['id']}")
    assert (after["id"], after["title"], after["sha256"]) == (stored["id"], "final.md", stored["sha256"])
    assert [chunk["id"] for chunk in after["chunks"]] == [chunk["id"] for chunk in detail["chunks"]]
    assert api(engine, "GET", "/status")["queue"] == queue  # no job: nothing was read or embedded again


def test_a_no_op_rerun_reads_no_file_and_a_lost_state_is_rebuilt(engine: Service, tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    target = write(folder / "a.md", "original text about the stint")
    write(folder / "b.md", "another file about the stilt")
    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "cached")
    assert code == 0 and report["added"] == 2 and (tmp_path / "state.json").exists()

    # Same size, same mtime, same inode, other bytes: only reading the file would notice.
    stat = target.stat()
    with open(target, "r+b") as handle:
        handle.write(b"ORIGINAL")
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "cached")
    assert code == 0 and (report["skipped"], report["updated"]) == (2, 0), report  # trusted the state: not read

    (tmp_path / "state.json").unlink()  # lost: rebuilt from the engine, every file read
    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "cached")
    assert code == 0 and (report["skipped"], report["updated"]) == (1, 1), report

    # A document deleted behind the state file's back makes the state stale: the next run notices.
    doc = documents(engine, "cached")["cache/b.md"]
    api_delete = requests.delete(f"{engine.url}/api/v1/documents/{doc['id']}", headers={"Authorization": f"Bearer {KEY}"},
                                 timeout=30)
    assert api_delete.status_code == 204
    code, report = ingest_json(engine, tmp_path, str(folder), "--collection", "cached")
    assert code == 0 and (report["added"], report["skipped"]) == (1, 1), report


def test_a_bad_path_stops_the_run_and_an_unreadable_file_is_reported_and_skipped(engine: Service, tmp_path: Path) -> None:
    missing = ingest(engine, tmp_path, str(tmp_path / "nowhere"), str(tmp_path), "--collection", "unreadable")
    assert missing.returncode == 2 and "nowhere" in missing.stderr and "does not exist" in missing.stderr
    assert documents(engine, "unreadable") == {}

    folder = tmp_path / "files"
    write(folder / "ok.md", "a readable note about the ringed plover")
    secret = write(folder / "secret.md", "never read")
    secret.chmod(0)
    # Root reads any file: the CLI then runs without the capabilities that let it (setpriv, util-linux).
    wrapper = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    if wrapper and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: every file is readable")
    argv = [*wrapper, sys.executable, "-m", "kb_bridge", "ingest", str(folder), "--collection", "unreadable",
            "--state", str(tmp_path / "state.json")]
    try:
        result = subprocess.run(argv, env=_env(engine), cwd=REPO, capture_output=True, text=True, timeout=300)
    finally:
        secret.chmod(0o600)
    assert result.returncode == 1, result.stderr
    assert "failed: files/secret.md: cannot read the file: Permission denied" in result.stdout, result.stdout
    assert "added 1," in result.stdout and set(documents(engine, "unreadable")) == {"files/ok.md"}


# --- --watch ---------------------------------------------------------------------------------------------------


class Watcher:
    """`kb-bridge ingest --watch` as a process, with its stdout lines collected as they come."""

    def __init__(self, engine: Service, tmp: Path, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kb_bridge", "ingest", "--watch", *args, "--state", str(tmp / "state.json")],
            env=_env(engine), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        os.set_blocking(self.process.stdout.fileno(), False)  # type: ignore[union-attr]
        self.until(lambda line: "watching" in line, 60)

    def read(self) -> None:
        assert self.process.stdout is not None
        while chunk := self.process.stdout.readline():
            self.lines.append(chunk.rstrip("\n"))

    def until(self, matches: Callable[[str], bool], seconds: float) -> float:
        """Seconds until a line matches (read as they come); TimeoutError after `seconds`."""
        started = time.monotonic()

        def seen() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"the watcher exited {self.process.returncode}: {self.process.stderr.read()}")  # type: ignore[union-attr]
            self.read()
            return any(matches(line) for line in self.lines)

        wait_until(seen, seconds, what="a line from the watcher")
        return time.monotonic() - started

    def stop(self, signum: int = signal.SIGINT) -> tuple[int, str]:
        self.read()
        os.set_blocking(self.process.stdout.fileno(), True)  # type: ignore[union-attr]
        self.process.send_signal(signum)
        out, err = self.process.communicate(timeout=30)
        self.lines.extend(out.splitlines())
        return self.process.returncode, err


def _within(seconds: float, check: Callable[[], bool], what: str) -> float:
    started = time.monotonic()
    wait_until(check, seconds, interval=0.02, what=what)
    took = time.monotonic() - started
    print(f"watch: {what} in {took:.2f} s")
    return took


def test_watch_reflects_create_change_rename_and_delete_and_stops_on_ctrl_c(engine: Service, tmp_path: Path) -> None:
    folder = tmp_path / "live"
    write(folder / "seed.md", "the seed note about teal")
    watcher = Watcher(engine, tmp_path, str(folder), "--collection", "live", "--prune")
    try:
        wait_until(lambda: "live/seed.md" in documents(engine, "live"), 30, what="the first pass")
        times = []

        # A file written in pieces is read once, complete.
        with open(folder / "new.md", "w") as handle:
            handle.write("The garganey ")
            handle.flush()
            handle.write("arrived on the scrape.")
        times.append(_within(WATCH_SECONDS, lambda: bool(fts(engine, "garganey scrape", "live")), "create"))
        created = documents(engine, "live")["live/new.md"]
        assert created["size_bytes"] == len("The garganey arrived on the scrape.")

        write(folder / "new.md", "The pintail replaced it.")
        times.append(_within(WATCH_SECONDS, lambda: bool(fts(engine, "pintail", "live"))
                             and not fts(engine, "garganey", "live"), "change"))

        changed_id = documents(engine, "live")["live/new.md"]["id"]
        (folder / "new.md").rename(folder / "renamed.md")
        times.append(_within(WATCH_SECONDS, lambda: set(documents(engine, "live")) == {"live/seed.md", "live/renamed.md"},
                             "rename"))
        assert documents(engine, "live")["live/renamed.md"]["id"] == changed_id  # moved, not uploaded again

        (folder / "seed.md").unlink()
        times.append(_within(WATCH_SECONDS, lambda: set(documents(engine, "live")) == {"live/renamed.md"}, "delete"))
        watcher.until(lambda line: "removed live/seed.md" in line, 5)
        assert any("moved live/new.md -> live/renamed.md" in line for line in watcher.lines), watcher.lines
        assert any(line.endswith("added live/new.md") for line in watcher.lines), watcher.lines
        assert any(line.endswith("updated live/new.md") for line in watcher.lines), watcher.lines
    finally:
        code, err = watcher.stop()
    assert code == 0 and "Traceback" not in err, err
    assert watcher.lines[-1].endswith("stopped")


def test_watch_stops_on_sigterm_as_on_ctrl_c(engine: Service, tmp_path: Path) -> None:
    folder = tmp_path / "term"
    write(folder / "one.md", "the watch's first pass: the wigeon")
    watcher = Watcher(engine, tmp_path, str(folder), "--collection", "term")
    try:
        watcher.until(lambda line: line.endswith("added term/one.md"), 60)
    finally:
        code, err = watcher.stop(signal.SIGTERM)  # a service manager's stop
    assert code == 0 and "Traceback" not in err, err
    assert watcher.lines[-1].endswith("stopped")


def test_watch_survives_an_engine_restart_and_catches_up(tmp_path: Path) -> None:
    data = tmp_path / "data"
    engine = start_engine(tmp_path, data, env={"KB_API_KEY": KEY, "KB_ENGINE_EMBEDDER": "none"})
    port = int(engine.url.rsplit(":", 1)[1])
    folder = tmp_path / "restart"
    write(folder / "before.md", "written before the restart: the smew")
    watcher = Watcher(engine, tmp_path, str(folder), "--collection", "restart", "--prune")
    try:
        wait_until(lambda: "restart/before.md" in documents(engine, "restart"), 30, what="the first pass")
        engine.stop()
        write(folder / "during.md", "written while the engine was down: the goosander")
        (folder / "before.md").unlink()
        watcher.until(lambda line: "engine:" in line and "trying again" in line, 60)
        engine = start_engine(tmp_path, data, env={"KB_API_KEY": KEY, "KB_ENGINE_EMBEDDER": "none"}, port=port)
        wait_until(lambda: set(documents(engine, "restart")) == {"restart/during.md"}, 60, what="the catch-up")
        assert fts(engine, "goosander", "restart")
    finally:
        code, err = watcher.stop()
        engine.stop()
    assert code == 0 and "Traceback" not in err, err
