"""The settings of a command that talks to the engine, with its logging: warnings only, secrets redacted."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable

from kb_bridge.logs import configure_logging
from kb_bridge.settings import Settings, load_settings

Command = Callable[[argparse.Namespace], int]


def with_settings(command: Callable[[argparse.Namespace, Settings], int]) -> Command:
    """`command(args, settings)` as argparse's `func(args)`; a bad KB_* setting raises SettingsError (exit 2)."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        settings = load_settings()
        configure_logging("WARNING", False, settings.secrets())
        return command(args, settings)

    return run
