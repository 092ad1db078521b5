"""`kb-bridge` before a command runs: Ctrl-C while its modules load is the one line and exit status 130 of any
other Ctrl-C (cli/exits.py), not a KeyboardInterrupt traceback; `serve`'s flags are checked as their settings are."""

from __future__ import annotations

import pytest

import kb_bridge.cli
from kb_bridge.cli import main


def test_ctrl_c_while_the_commands_modules_load_is_one_line_and_130(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt  # as SIGINT lands in one of _parser()'s imports

    monkeypatch.setattr(kb_bridge.cli, "_parser", interrupted)
    assert main(["list"]) == 130
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "kb-bridge: interrupted\n")


def test_serve_workers_0_is_refused_as_kb_workers_0_is_not_taken_for_the_default(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KB_WORKERS", "2")  # so that the 0 serve writes into os.environ is undone after the test
    assert main(["serve", "--workers", "0"]) == 2  # it served with 2 workers
    assert capsys.readouterr().err == "kb-bridge: configuration error: KB_WORKERS: must be between 1 and 256, got 0\n"


@pytest.mark.parametrize("argv, stops", [
    (["export", "kb.jsonl"], True), (["import", "kb.jsonl"], True), (["ingest", "notes"], True),
    (["serve"], False), (["stdio"], False), (["demo"], False), (["search", "q"], False),
])
def test_sigterm_is_taken_as_ctrl_c_by_the_commands_that_tidy_or_report_at_the_end(argv: list[str], stops: bool) -> None:
    # serve and demo take SIGTERM themselves (gunicorn, cli/demo.py); stdio's own shutdown is docs/protocol.md's.
    assert kb_bridge.cli._parser().parse_args(argv).sigterm_stops is stops
