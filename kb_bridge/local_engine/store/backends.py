"""Which store a configuration asks for."""

from __future__ import annotations

from ..config import EngineConfig
from .base import Store
from .sqlite import SqliteStore


def open_store(config: EngineConfig) -> Store:
    """The store of this configuration (not yet opened: call `open()`)."""
    return SqliteStore(config.database_path, title_repeats=config.bm25_title_weight,
                       exact_below=config.exact_search_below)
