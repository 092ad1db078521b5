"""`kb-bridge backup`'s copy (local_engine/backup.py, backup_files.py): the staged file of a job queued in the
copy is kept even when the engine finishes that job while the backup runs, and a backup that fails or is
interrupted leaves nothing behind, so that the same command can be run again into the same directory."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import flask
import pytest

from kb_bridge.local_engine import backup, backup_files
from kb_bridge.local_engine.errors import EngineError
from kb_bridge.local_engine.app import engine_of
from kb_bridge.testing.engine_app import API, upload, wait_job
from kb_bridge.testing.processes import clean_env

VICTIM = b"the only copy of the victim file's text: turnstones flip pebbles"


class Quiet:
    """A Progress that shows nothing; `on_close` runs where the page copy ends (before the copy is checked)."""

    def __init__(self, on_close: Callable[[], None] = lambda: None, on_advance: Callable[[], None] = lambda: None):
        self.on_close, self.on_advance = on_close, on_advance

    def phase(self, name: str, total: int | None, unit: str) -> object:
        return self

    def advance(self, amount: int, note: str = "") -> None:
        self.on_advance()

    def advance_to(self, done: int, total: int | None = None) -> None:
        self.on_advance()

    def say(self, message: str) -> None:
        pass

    def close(self) -> None:
        self.on_close()


def stopped_with_a_queued_upload(make_app: Callable[..., flask.Flask], data: Path) -> int:
    """A store left by an engine stopped while an upload's job was queued (it resumes at the next start)."""
    app = make_app(data_dir=data, database_url=None)
    engine_of(app).worker.stop(5)
    response = upload(app.test_client(), "victim.txt", VICTIM)
    assert response.status_code == 202
    engine_of(app).close()
    return int(response.json["id"])


def test_a_job_that_finishes_during_the_backup_keeps_its_file_in_the_copy(
        make_app: Callable[..., flask.Flask], tmp_path: Path) -> None:
    data = tmp_path / "data"
    victim = stopped_with_a_queued_upload(make_app, data)

    def engine_finishes_the_job() -> None:
        # While the copy is checked (quick_check: minutes on a large store), the engine runs the job and
        # deletes its staged file.
        app = make_app(data_dir=data, database_url=None)
        assert wait_job(app.test_client(), victim)["status"] == "done"
        engine_of(app).close()

    target = tmp_path / "backup"
    target.mkdir()
    summary = backup.back_up(data / "engine.sqlite3", target, Quiet(on_close=engine_finishes_the_job))
    assert not [p for p in (data / "uploads").iterdir() if p.is_file()]  # the engine's copy is gone
    assert summary["queued_files"] == 1
    with sqlite3.connect(target / "engine.sqlite3") as copy:
        [(status, staged)] = copy.execute("SELECT status, staged_path FROM jobs WHERE id = ?", (victim,)).fetchall()
    assert status == "queued" and (target / "uploads" / staged).read_bytes() == VICTIM
    assert [p.name for p in (target / "uploads").iterdir()] == [staged]  # nothing else

    restored = tmp_path / "restored"  # restored as the README says: the copy is a data directory of its own
    target.rename(restored)
    app = make_app(data_dir=restored, database_url=None)
    job = wait_job(app.test_client(), victim)
    assert job["status"] == "done", job
    assert app.test_client().get(f"{API}/documents/{job['document_id']}/original").data == VICTIM


def test_an_interrupted_backup_leaves_the_directory_empty_and_a_rerun_succeeds(
        make_app: Callable[..., flask.Flask], tmp_path: Path) -> None:
    data = tmp_path / "data"
    stopped_with_a_queued_upload(make_app, data)
    target = tmp_path / "backup"
    target.mkdir()

    def ctrl_c() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        backup.back_up(data / "engine.sqlite3", target, Quiet(on_advance=ctrl_c))
    assert list(target.iterdir()) == []

    done = subprocess.run([sys.executable, "-m", "kb_bridge", "backup", str(target), "--data", str(data)],
                          env=clean_env({}), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "1 queued file(s)" in done.stdout
    assert sorted(p.name for p in target.iterdir()) == ["engine.sqlite3", "uploads"]


def test_a_backup_never_writes_through_a_link_put_in_place_of_its_temporary_copy(
        make_app: Callable[..., flask.Flask], tmp_path: Path) -> None:
    """`kb-bridge backup` finds its directory empty, then writes `engine.sqlite3.part` there: a link someone who can
    write in that directory put there meanwhile had the whole database written over the file it named."""
    data = tmp_path / "data"
    stopped_with_a_queued_upload(make_app, data)
    target, victim = tmp_path / "backup", tmp_path / "victim.txt"
    target.mkdir()
    victim.write_text("the victim's own file\n")
    (target / "engine.sqlite3.part").symlink_to(victim)
    with pytest.raises(EngineError):
        backup.back_up(data / "engine.sqlite3", target, Quiet())
    assert victim.read_text() == "the victim's own file\n"


def test_a_needed_file_gone_before_the_backup_took_it_fails_naming_its_job(tmp_path: Path) -> None:
    """A file staged while the database was copied, whose job finished before the backup could take it: the
    backup fails (cli/backup.py: exit 1) rather than keep a job without its file."""
    uploads, into = tmp_path / "uploads", tmp_path / "backup" / "uploads"
    uploads.mkdir()
    into.parent.mkdir()
    (uploads / "kept.txt").write_bytes(b"abc")
    taken = backup_files.take_all(uploads, into)
    (uploads / "kept.txt").unlink()  # its job finished: the link the backup took keeps the bytes
    needed = [backup_files.Needed(3, "kept.txt", 3), backup_files.Needed(7, "late.txt", 4)]
    with pytest.raises(EngineError, match="job 7's uploaded file"):
        backup_files.take_needed(uploads, into, taken, needed)
    assert backup_files.take_needed(uploads, into, taken, needed[:1]) == 1
    assert (into / "kept.txt").read_bytes() == b"abc"
