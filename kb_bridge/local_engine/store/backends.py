"""Which store a configuration asks for."""

from __future__ import annotations

from ..config import EngineConfig
from .base import Store


def open_store(config: EngineConfig) -> Store:
    """The store of this configuration (not yet opened: call `open()`): PostgreSQL when a database URL is
    given, else SQLite in the data directory. Each backend is imported only when chosen (psycopg is an extra)."""
    if config.database_url:
        from .postgres import PostgresStore

        return PostgresStore(config.database_url, config.data_dir, config.uploads_dir,
                             title_repeats=config.bm25_title_weight, keep_versions=config.keep_versions)
    from .sqlite import SqliteStore

    return SqliteStore(config.database_path, title_repeats=config.bm25_title_weight,
                       exact_below=config.exact_search_below, keep_versions=config.keep_versions)
