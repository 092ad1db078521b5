"""What an operator's commands leave on disk holds every note: the local engine's data directory (its database,
staged uploads, indexes), a `kb-bridge backup`, a `kb-bridge export`. None of it may be readable by another
user of the machine, whatever the umask the command was started under (0022 is the common default, which
made every one of them world-readable)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from kb_bridge.testing.processes import ENGINE_KEY, REPO, Service, clean_env, start_engine, wait_until

SECRET_NOTE = "the quartermaster's safe opens with 4-8-15-16"


def others_can_reach(path: Path) -> list[str]:
    """`path` and everything below it that group or others may read, write or enter."""
    found = []
    for entry in [path, *path.rglob("*")]:
        mode = stat.S_IMODE(entry.lstat().st_mode)
        if mode & 0o077:
            found.append(f"{entry} {mode:04o}")
    return found


@pytest.fixture
def common_umask() -> Iterator[None]:
    """Start the commands under umask 0022, as a login shell usually does (they inherit it)."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture
def engine(tmp_path: Path, common_umask: None) -> Iterator[Service]:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)  # as an older engine, or the operator's mkdir, left it
    data.chmod(0o755)
    service = start_engine(tmp_path, data, env={"KB_API_KEY": ENGINE_KEY, "KB_ENGINE_EMBEDDER": "none"})
    try:
        headers = {"Authorization": f"Bearer {ENGINE_KEY}"}
        response = requests.post(service.url + "/api/v1/jobs", json={"text": SECRET_NOTE}, headers=headers, timeout=30)
        assert response.status_code == 202, response.text
        job = response.json()["id"]
        wait_until(lambda: requests.get(f"{service.url}/api/v1/jobs/{job}", headers=headers, timeout=30).json()["status"]
                   == "done", 60, what="the note stored")
        yield service
    finally:
        service.stop()


def kb(engine: Service, *args: str) -> subprocess.CompletedProcess[str]:
    env = clean_env({"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY})
    return subprocess.run([sys.executable, "-m", "kb_bridge", *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=REPO)


def test_the_engines_data_directory_is_private_to_its_user(engine: Service, tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert (data / "engine.sqlite3").is_file()
    assert stat.S_IMODE(data.stat().st_mode) == 0o700, "the data directory others could enter"
    assert others_can_reach(data) == []


def test_a_backup_is_private_to_its_user(engine: Service, tmp_path: Path) -> None:
    new, existing = tmp_path / "backups" / "new", tmp_path / "existing"
    existing.mkdir(mode=0o755)
    existing.chmod(0o755)  # an empty directory the operator made: its own mode is the operator's
    for target in (new, existing):
        result = kb(engine, "backup", str(target), "--data", str(tmp_path / "data"))
        assert result.returncode == 0, result.stderr
        assert (target / "engine.sqlite3").is_file()
    assert others_can_reach(new) == []
    assert others_can_reach(existing) == [f"{existing} 0755"]  # the files in it are not


def test_an_export_is_private_to_its_user(engine: Service, tmp_path: Path) -> None:
    target = tmp_path / "kb.jsonl"
    result = kb(engine, "export", str(target))
    assert result.returncode == 0, result.stderr
    assert SECRET_NOTE in target.read_text()
    assert others_can_reach(target) == []


def test_an_export_never_writes_through_a_link_planted_where_it_writes_its_temporary_file(
        engine: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The temporary file beside the export was named after the process id: whoever can write in that directory
    could put a link there in advance, and the export wrote every note through it, over the file it named."""
    from kb_bridge.cli import main

    target, victim = tmp_path / "kb.jsonl", tmp_path / "victim.txt"
    victim.write_text("the victim's own file\n")
    (tmp_path / f".{target.name}.{os.getpid()}.part").symlink_to(victim)
    for name, value in clean_env({"KB_ENGINE_URL": engine.url, "KB_API_KEY": ENGINE_KEY}).items():
        if name.startswith("KB_"):
            monkeypatch.setenv(name, value)
    assert main(["export", str(target)]) == 0
    assert victim.read_text() == "the victim's own file\n"
    assert SECRET_NOTE in target.read_text() and not target.is_symlink()
    assert others_can_reach(target) == []
