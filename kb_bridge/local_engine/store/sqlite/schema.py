"""Versioned schema migrations, tracked in SQLite's `PRAGMA user_version`.

Each migration runs in its own transaction, so an upgrade interrupted halfway leaves the database at the
last completed version and the next start carries on. A database from a newer engine is refused, never
"downgraded". Add a migration by appending to MIGRATIONS; never edit one that has shipped.
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
from pathlib import Path

from ...errors import ConfigError

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


_BASE_SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # AUTOINCREMENT: ids are never reused, so a client holding the id of a deleted document gets 404,
    # not somebody else's document.
    """CREATE TABLE documents (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        title TEXT NOT NULL,
        doc_type TEXT NOT NULL,
        source_path TEXT,
        size_bytes INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        version INTEGER NOT NULL DEFAULT 1,
        created_at TEXT NOT NULL
    )""",
    "CREATE INDEX documents_source_path ON documents(source_path)",
    "CREATE INDEX documents_doc_type ON documents(doc_type)",
    # The full text lives apart from `documents` so that listing documents never reads it.
    """CREATE TABLE document_content (
        document_id INTEGER PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
        text TEXT NOT NULL
    )""",
    """CREATE TABLE document_tags (
        document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        tag TEXT NOT NULL,
        PRIMARY KEY (document_id, tag)
    ) WITHOUT ROWID""",
    "CREATE INDEX document_tags_tag ON document_tags(tag, document_id)",
    # `title` repeats the document's title because the full-text index ranks title hits per chunk.
    # A note's PATCH and a move (PATCH /documents/{id}) change a title, and rewrite every chunk's copy.
    """CREATE TABLE chunks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        chunk_index INTEGER NOT NULL,
        title TEXT NOT NULL,
        text TEXT NOT NULL,
        text_sha256 TEXT NOT NULL,
        UNIQUE (document_id, chunk_index)
    )""",
    "CREATE INDEX chunks_text_sha256 ON chunks(text_sha256)",
    # External-content FTS5 table over `chunks`: the text is stored once; triggers keep the index in step.
    """CREATE VIRTUAL TABLE chunks_fts USING fts5(
        title, text, content='chunks', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    )""",
    """CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts(rowid, title, text) VALUES (new.id, new.title, new.text);
    END""",
    """CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, title, text) VALUES ('delete', old.id, old.title, old.text);
    END""",
    """CREATE TRIGGER chunks_fts_update AFTER UPDATE ON chunks BEGIN
        INSERT INTO chunks_fts(chunks_fts, rowid, title, text) VALUES ('delete', old.id, old.title, old.text);
        INSERT INTO chunks_fts(rowid, title, text) VALUES (new.id, new.title, new.text);
    END""",
    # Normalised float32 vectors, little-endian; the model that made them is recorded in meta.
    """CREATE TABLE embeddings (
        chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
        vector BLOB NOT NULL
    )""",
    # `payload` holds what the job needs (note text, upload fields) until it is done; `staged_path` the
    # uploaded file kept under the data directory until then. No foreign key on document_id: the job
    # history outlives a deleted document.
    """CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        type TEXT NOT NULL,
        status TEXT NOT NULL,
        document_id INTEGER,
        filename TEXT,
        error TEXT,
        created_at TEXT NOT NULL,
        started_at TEXT,
        finished_at TEXT,
        payload TEXT,
        staged_path TEXT
    )""",
    "CREATE INDEX jobs_status ON jobs(status, id)",
    """CREATE TABLE idempotency_keys (
        key TEXT PRIMARY KEY,
        body_sha256 TEXT NOT NULL,
        job_id INTEGER NOT NULL,
        created_at TEXT NOT NULL
    )""",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "base schema (kb engine 2.x)", _BASE_SCHEMA),
    Migration(
        2,
        "documents.updated_at for note mutation (kb engine 3.0)",
        (
            "ALTER TABLE documents ADD COLUMN updated_at TEXT",
            "UPDATE documents SET updated_at = created_at",
            "CREATE INDEX documents_updated_at ON documents(updated_at, id)",
        ),
    ),
    Migration(
        3,
        "full text and vectors in derived indexes kept in step by a change log; job priority (kb engine 3.4)",
        (
            # The full-text index moves out of SQLite (store/text_index.py): FTS5 ranked every match.
            "DROP TRIGGER chunks_fts_insert",
            "DROP TRIGGER chunks_fts_delete",
            "DROP TRIGGER chunks_fts_update",
            "DROP TABLE chunks_fts",
            # 1: interactive (notes, small files: embedded first), 0: bulk.
            "ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
            "CREATE INDEX jobs_queue ON jobs(status, priority DESC, id)",
            # Every change the derived indexes must follow, in commit order (store/derived.py).
            # `kind` says what `id` is: a chunk whose row changed, a document whose tags changed, a chunk
            # whose vector changed. The triggers fire for cascaded deletes too.
            "CREATE TABLE index_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, id INTEGER NOT NULL)",
            *(
                f"CREATE TRIGGER index_log_{table}_{event.lower()} AFTER {event} ON {table} BEGIN "
                f"INSERT INTO index_log (kind, id) VALUES ('{kind}', {row}.{column}); END"
                for table, kind, column in (("chunks", "chunk", "id"), ("document_tags", "document", "document_id"),
                                            ("embeddings", "vector", "chunk_id"))
                for event, row in (("INSERT", "new"), ("DELETE", "old"), ("UPDATE", "new"))
            ),
            # Which database the indexes on disk were built from: a restored or replaced database file
            # does not match them, and they are rebuilt.
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('index_epoch', lower(hex(randomblob(16))))",
        ),
    ),
    Migration(
        4,
        "an uploaded file's original bytes kept with its document (kb engine 3.6)",
        (
            """CREATE TABLE originals (
                document_id INTEGER PRIMARY KEY REFERENCES documents(id) ON DELETE CASCADE,
                filename TEXT,
                content_type TEXT NOT NULL,
                size INTEGER NOT NULL,
                data BLOB NOT NULL
            )""",
        ),
    ),
    Migration(
        5,
        "jobs keep the tags their document gets, past the end of the job (kb engine 3.7)",
        # NULL for the jobs queued before: the engine does not know their tags, and says so (null).
        ("ALTER TABLE jobs ADD COLUMN tags TEXT",),
    ),
    Migration(
        6,
        "documents found by creation time: search and listings filter on it (kb engine 3.8)",
        # updated_at has had its index since version 2.
        ("CREATE INDEX documents_created_at ON documents(created_at, id)",),
    ),
    Migration(
        7,
        "a note's earlier versions, who made each version, and the keys that refuse duplicate notes (kb engine 3.9)",
        (
            "ALTER TABLE documents ADD COLUMN changed_by TEXT",
            # A version as it was just before a change to the text or title replaced it (store/history.py).
            # `tags` is a JSON array.
            """CREATE TABLE document_versions (
                document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
                version INTEGER NOT NULL,
                title TEXT NOT NULL,
                text TEXT NOT NULL,
                tags TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                changed_by TEXT,
                PRIMARY KEY (document_id, version)
            ) WITHOUT ROWID""",
            # One row per note added with `unique_in`: the primary key makes the second of two identical
            # notes in one scope impossible (store/note_keys.py). `job_id` until the document exists.
            """CREATE TABLE note_keys (
                scope TEXT NOT NULL,
                text_key TEXT NOT NULL,
                job_id INTEGER,
                document_id INTEGER REFERENCES documents(id) ON DELETE CASCADE,
                PRIMARY KEY (scope, text_key)
            )""",
            "CREATE INDEX note_keys_document ON note_keys(document_id)",
            "CREATE INDEX note_keys_job ON note_keys(job_id)",
        ),
    ),
    Migration(
        8,
        "the job that created each document found by document (adjacent notes in search, store/adjacent.py)",
        ("CREATE INDEX jobs_document ON jobs(document_id)",),
    ),
    Migration(
        9,
        "the full-text index filters by time itself: a change of a document's times is logged for it",
        # The index holds created_at and updated_at (store/text_index.py, layout 2) and follows the log, so
        # every change of a document's times is logged, whatever else the change touched.
        ("CREATE TRIGGER index_log_documents_times AFTER UPDATE OF created_at, updated_at ON documents "
         "WHEN old.created_at IS NOT new.created_at OR old.updated_at IS NOT new.updated_at BEGIN "
         "INSERT INTO index_log (kind, id) VALUES ('document', new.id); END",),
    ),
    Migration(
        10,
        "times before year 1000 written with four digits, as every other year (clock.format_iso)",
        # Engines before this one wrote year 999 as "999-…" (strftime's %Y, unpadded): such a time neither
        # sorted with the rest nor parsed back. The trigger of version 9 logs each repaired document for
        # the text index, which then files it under its time again.
        tuple(f"UPDATE {table} SET {column} = substr('000', 1, 5 - instr({column}, '-')) || {column} "
              f"WHERE {column} GLOB '[0-9]-*' OR {column} GLOB '[0-9][0-9]-*' OR {column} GLOB '[0-9][0-9][0-9]-*'"
              for table, column in (("documents", "created_at"), ("documents", "updated_at"),
                                    ("document_versions", "updated_at"))),
    ),
    Migration(
        11,
        "how many times a job was resumed after its engine stopped (store/base.py, MAX_RESUMES)",
        ("ALTER TABLE jobs ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0",),
    ),
    Migration(
        12,
        "whether a running job is being worked on, so that a stop counts as its resume (store/base.py, MAX_RESUMES)",
        ("ALTER TABLE jobs ADD COLUMN working INTEGER NOT NULL DEFAULT 0",),
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def refuse_newer(path: Path) -> None:
    """ConfigError when the database at `path` (if any) is newer than this engine: the command line checks
    this before serving, so that a rolled-back kb-bridge stops with one line (exit 2), as on PostgreSQL,
    rather than in gunicorn's worker with a traceback. Read-only: the worker migrates, under its lock."""
    if not path.is_file():
        return
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            version = schema_version(conn)
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return  # not a database this check can read: the engine's own start says what is wrong with it
    _refuse_newer(version)


def _refuse_newer(version: int) -> None:
    if version > LATEST_VERSION:
        raise ConfigError(
            f"the database is at schema version {version}, newer than this engine knows ({LATEST_VERSION}); "
            "upgrade kb-bridge or use another --data directory"
        )


def migrate(conn: sqlite3.Connection, target: int = LATEST_VERSION) -> int:
    """Bring the database up to `target` (tests stop early to build an old database). Returns the version."""
    current = schema_version(conn)
    _refuse_newer(current)
    for migration in MIGRATIONS:
        if current < migration.version <= target:
            _apply(conn, migration)
            current = migration.version
    return current


def _apply(conn: sqlite3.Connection, migration: Migration) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        if schema_version(conn) >= migration.version:
            # Another process got here first; the write lock made us wait until it had finished.
            conn.execute("ROLLBACK")
            return
        logger.info("migrating database to version %d: %s", migration.version, migration.description)
        for statement in migration.statements:
            conn.execute(statement)
        # PRAGMA does not take parameters; the version is our own integer.
        conn.execute(f"PRAGMA user_version = {int(migration.version)}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
