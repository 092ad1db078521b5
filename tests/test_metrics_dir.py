"""The sweep of Prometheus multiprocess directories whose servers were killed outright (serving/metrics_dir.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kb_bridge.serving.metrics_dir import PREFIX, sweep_abandoned

NAMESPACE = "4026531836"


def ended_pid() -> int:
    """The process id of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_directory_of_a_master_that_no_longer_runs_is_removed_and_every_other_is_kept(tmp_path: Path) -> None:
    dead = ended_pid()
    abandoned = tmp_path / f"{PREFIX}{NAMESPACE}-{dead}-abc123"
    abandoned.mkdir()
    (abandoned / "counter_1.db").write_bytes(b"counts")
    running = tmp_path / f"{PREFIX}{NAMESPACE}-{os.getpid()}-def456"  # this test's own process runs
    other_namespace = tmp_path / f"{PREFIX}4026532000-{dead}-ghi789"  # its ids mean nothing here
    older_name = tmp_path / f"{PREFIX}jkl012"  # a server before the names held a process id
    not_a_number = tmp_path / f"{PREFIX}{NAMESPACE}-12x-mno345"
    for kept in (running, other_namespace, older_name, not_a_number):
        kept.mkdir()
    a_file = tmp_path / f"{PREFIX}{NAMESPACE}-{dead}-file"
    a_file.write_text("not a directory")
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "precious").write_text("kept")
    a_link = tmp_path / f"{PREFIX}{NAMESPACE}-{dead}-link"
    a_link.symlink_to(target)

    removed = sweep_abandoned(tmp_path, NAMESPACE)

    assert removed == [abandoned]
    assert not abandoned.exists()
    assert all(path.is_dir() for path in (running, other_namespace, older_name, not_a_number))
    assert a_file.read_text() == "not a directory"
    assert a_link.is_symlink() and (target / "precious").read_text() == "kept"


def test_a_root_that_cannot_be_read_sweeps_nothing(tmp_path: Path) -> None:
    assert sweep_abandoned(tmp_path / "missing", NAMESPACE) == []
