"""The PostgreSQL schema and its versioned migrations, owned by the engine.

The version is a row in `kb_schema`; every migration runs in one transaction under a transaction-level
advisory lock, so two replicas started at the same moment on an empty database both come up: one migrates,
the other waits for the lock and then finds nothing to do. A database from a newer engine is refused.
Add a migration by appending to MIGRATIONS; never edit one that has shipped.

What differs from the SQLite schema (store/sqlite/schema.py), and why:
- vectors live in pgvector (`halfvec`, HNSW, cosine), made when a model is first used (`vector_table`):
  their dimension is the model's;
- full text is a tantivy index each replica derives from the tables through `index_log`
  (store/derived.py): BM25 with top-k pruning ranks exactly as the SQLite engine does, where a GIN index over a
  tsvector ranks every match of a common word with ts_rank (the cost that moved SQLite off FTS5, measured in
  docs/benchmarks.md) and has no BM25. `index_log` rows carry the number of the transaction that
  made them, assigned at commit in commit order (postgres/index_log.py);
- jobs carry a lease (owner, expiry) for SELECT ... FOR UPDATE SKIP LOCKED claiming by several replicas;
- an uploaded file's bytes wait in `job_uploads` until its job is done, so any replica can run the job.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from ...errors import ConfigError

logger = logging.getLogger(__name__)

# Any constant unlikely to be used by another application on the same database.
SCHEMA_LOCK = 0x6B622D62726964  # "kb-brid"


@dataclasses.dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


_BASE = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE documents (
        id BIGSERIAL PRIMARY KEY,
        title TEXT NOT NULL,
        doc_type TEXT NOT NULL,
        source_path TEXT,
        size_bytes BIGINT NOT NULL,
        sha256 TEXT NOT NULL,
        version INTEGER NOT NULL DEFAULT 1,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )""",
    "CREATE INDEX documents_source_path ON documents (source_path)",
    "CREATE INDEX documents_doc_type ON documents (doc_type)",
    "CREATE INDEX documents_updated_at ON documents (updated_at, id)",
    """CREATE TABLE document_content (
        document_id BIGINT PRIMARY KEY REFERENCES documents (id) ON DELETE CASCADE,
        text TEXT NOT NULL
    )""",
    """CREATE TABLE document_tags (
        document_id BIGINT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
        tag TEXT NOT NULL,
        PRIMARY KEY (document_id, tag)
    )""",
    "CREATE INDEX document_tags_tag ON document_tags (tag, document_id)",
    """CREATE TABLE chunks (
        id BIGSERIAL PRIMARY KEY,
        document_id BIGINT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
        chunk_index INTEGER NOT NULL,
        title TEXT NOT NULL,
        text TEXT NOT NULL,
        text_sha256 TEXT NOT NULL,
        UNIQUE (document_id, chunk_index)
    )""",
    "CREATE INDEX chunks_text_sha256 ON chunks (text_sha256)",
    """CREATE TABLE jobs (
        id BIGSERIAL PRIMARY KEY,
        type TEXT NOT NULL,
        status TEXT NOT NULL,
        document_id BIGINT,
        filename TEXT,
        error TEXT,
        created_at TEXT NOT NULL,
        started_at TEXT,
        finished_at TEXT,
        payload TEXT,
        staged_path TEXT,
        priority INTEGER NOT NULL DEFAULT 0,
        lease_owner TEXT,
        lease_expires TIMESTAMPTZ
    )""",
    "CREATE INDEX jobs_queue ON jobs (priority DESC, id) WHERE status = 'queued'",
    "CREATE INDEX jobs_leases ON jobs (lease_expires) WHERE status = 'running'",
    "CREATE INDEX jobs_status ON jobs (status, id)",
    """CREATE TABLE job_uploads (
        job_id BIGINT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        part INTEGER NOT NULL,
        data BYTEA NOT NULL,
        PRIMARY KEY (job_id, part)
    )""",
    """CREATE TABLE idempotency_keys (
        key TEXT PRIMARY KEY,
        body_sha256 TEXT NOT NULL,
        job_id BIGINT NOT NULL,
        created_at TEXT NOT NULL
    )""",
    # The change log the replicas' full-text indexes follow. `seq` is NULL until the writing transaction
    # seals it just before commit (index_log.seal), with the next number from index_log_head, whose row
    # lock orders the sealing transactions: numbers are gapless and in commit order.
    "CREATE TABLE index_log (seq BIGINT, kind TEXT NOT NULL, id BIGINT NOT NULL, logged_at TIMESTAMPTZ "
    "NOT NULL DEFAULT now())",
    "CREATE INDEX index_log_seq ON index_log (seq)",
    "CREATE TABLE index_log_head (one INTEGER PRIMARY KEY CHECK (one = 1), seq BIGINT NOT NULL)",
    "INSERT INTO index_log_head VALUES (1, 0)",
    """CREATE FUNCTION kb_log_chunk() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO index_log (kind, id) VALUES ('chunk', CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END);
        RETURN NULL;
    END $$""",
    """CREATE FUNCTION kb_log_tags() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO index_log (kind, id)
        VALUES ('document', CASE WHEN TG_OP = 'DELETE' THEN OLD.document_id ELSE NEW.document_id END);
        RETURN NULL;
    END $$""",
    "CREATE TRIGGER chunks_logged AFTER INSERT OR UPDATE OR DELETE ON chunks FOR EACH ROW EXECUTE FUNCTION kb_log_chunk()",
    "CREATE TRIGGER tags_logged AFTER INSERT OR UPDATE OR DELETE ON document_tags "
    "FOR EACH ROW EXECUTE FUNCTION kb_log_tags()",
    # Which database the replicas' indexes were built from (a restored database does not match them).
    "INSERT INTO meta VALUES ('index_epoch', md5(random()::text || clock_timestamp()::text))",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "base schema (kb engine 3.5 on PostgreSQL)", _BASE),
    Migration(2, "an uploaded file's original bytes kept with its document (kb engine 3.6)", (
        """CREATE TABLE originals (
            document_id BIGINT PRIMARY KEY REFERENCES documents (id) ON DELETE CASCADE,
            filename TEXT,
            content_type TEXT NOT NULL,
            size BIGINT NOT NULL,
            data BYTEA NOT NULL
        )""",
    )),
    Migration(3, "jobs keep the tags their document gets, past the end of the job (kb engine 3.7)", (
        "ALTER TABLE jobs ADD COLUMN tags TEXT",
    )),
    Migration(4, "documents found by creation time: search and listings filter on it (kb engine 3.8)", (
        "CREATE INDEX documents_created_at ON documents (created_at, id)",
    )),
    Migration(5, "a note's earlier versions, who made each version, and the keys that refuse duplicate notes "
                 "(kb engine 3.9)", (
        "ALTER TABLE documents ADD COLUMN changed_by TEXT",
        """CREATE TABLE document_versions (
            document_id BIGINT NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
            version INTEGER NOT NULL,
            title TEXT NOT NULL,
            text TEXT NOT NULL,
            tags TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            changed_by TEXT,
            PRIMARY KEY (document_id, version)
        )""",
        """CREATE TABLE note_keys (
            scope TEXT NOT NULL,
            text_key TEXT NOT NULL,
            job_id BIGINT,
            document_id BIGINT REFERENCES documents (id) ON DELETE CASCADE,
            PRIMARY KEY (scope, text_key)
        )""",
        "CREATE INDEX note_keys_document ON note_keys (document_id)",
        "CREATE INDEX note_keys_job ON note_keys (job_id)",
    )),
    Migration(6, "the job that created each document found by document (adjacent notes in search, "
                 "store/adjacent.py)", (
        "CREATE INDEX jobs_document ON jobs (document_id)",
    )),
    Migration(7, "the full-text index filters by time itself: a change of a document's times is logged for it", (
        # The replicas' indexes hold created_at and updated_at (store/text_index.py, layout 2) and follow
        # the log, so every change of a document's times is logged, whatever else the change touched.
        """CREATE FUNCTION kb_log_document_times() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO index_log (kind, id) VALUES ('document', NEW.id);
            RETURN NULL;
        END $$""",
        "CREATE TRIGGER document_times_logged AFTER UPDATE OF created_at, updated_at ON documents FOR EACH ROW "
        "WHEN (OLD.created_at IS DISTINCT FROM NEW.created_at OR OLD.updated_at IS DISTINCT FROM NEW.updated_at) "
        "EXECUTE FUNCTION kb_log_document_times()",
    )),
    Migration(8, "times before year 1000 written with four digits, as every other year (clock.format_iso)", (
        # Engines before this one wrote year 999 as "999-…" (strftime's %Y, unpadded): such a time neither
        # sorted with the rest nor parsed back. The trigger of version 7 logs each repaired document, and
        # the log rows are sealed here as index_log.seal does (a migration is no db.write), so every
        # replica's text index files the document under its time again.
        *(f"UPDATE {table} SET {column} = lpad(split_part({column}, '-', 1), 4, '0') || "
          f"substr({column}, strpos({column}, '-')) WHERE {column} ~ '^[0-9]{{1,3}}-'"
          for table, column in (("documents", "created_at"), ("documents", "updated_at"),
                                ("document_versions", "updated_at"))),
        "UPDATE index_log_head SET seq = seq + 1 WHERE EXISTS (SELECT 1 FROM index_log WHERE seq IS NULL)",
        "UPDATE index_log SET seq = (SELECT seq FROM index_log_head) WHERE seq IS NULL",
    )),
    Migration(9, "how many times a job was resumed after its engine stopped or its lease ran out "
                 "(store/base.py, MAX_RESUMES)", (
        "ALTER TABLE jobs ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0",
    )),
    Migration(10, "whether a running job is being worked on, so that a stop or a lost lease counts as its "
                  "resume (store/base.py, MAX_RESUMES)", (
        "ALTER TABLE jobs ADD COLUMN working INTEGER NOT NULL DEFAULT 0",
    )),
)

LATEST_VERSION = MIGRATIONS[-1].version


def migrate(conn: Any) -> int:
    """Create the pgvector extension and bring the schema up to date (`conn` in autocommit). Returns the version.

    ConfigError, naming the problem, when the extension cannot be created or the schema is newer."""
    import psycopg

    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        try:
            with conn.transaction():
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as exc:
            raise ConfigError(
                "the PostgreSQL database has no pgvector extension and this user cannot create it "
                f"({type(exc).__name__}); run CREATE EXTENSION vector as a superuser, or install pgvector"
            ) from None
        conn.execute("CREATE TABLE IF NOT EXISTS kb_schema (one INTEGER PRIMARY KEY CHECK (one = 1), "
                     "version INTEGER NOT NULL)")
        row = conn.execute("SELECT version FROM kb_schema").fetchone()
        current = int(row[0]) if row else 0
        if current > LATEST_VERSION:
            raise ConfigError(
                f"the PostgreSQL database is at schema version {current}, newer than this engine knows "
                f"({LATEST_VERSION}); upgrade kb-bridge or point KB_ENGINE_DATABASE_URL at another database"
            )
        for migration in MIGRATIONS:
            if current < migration.version:
                logger.info("migrating the PostgreSQL schema to version %d: %s", migration.version,
                            migration.description)
                for statement in migration.statements:
                    conn.execute(statement)
                conn.execute("INSERT INTO kb_schema VALUES (1, %s) ON CONFLICT (one) DO UPDATE SET version = %s",
                             (migration.version, migration.version))
                current = migration.version
    return current


def vector_table(conn: Any, dim: int) -> bool:
    """Make `embeddings` hold vectors of `dim` dimensions (dropping vectors of another size). True if it was
    (re)made. Under the schema lock, so replicas loading the model together make it once."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
    row = conn.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = to_regclass('embeddings') AND attname = 'vector'"
    ).fetchone()
    if row is not None and row[0] == f"halfvec({dim})":
        return False
    conn.execute("DROP TABLE IF EXISTS embeddings")
    conn.execute(f"""CREATE TABLE embeddings (
        chunk_id BIGINT PRIMARY KEY REFERENCES chunks (id) ON DELETE CASCADE,
        vector halfvec({int(dim)}) NOT NULL
    )""")
    conn.execute(HNSW_INDEX)
    return True


# m 16 / ef_construction 64: pgvector's defaults, the same graph shape as the SQLite engine's usearch.
HNSW_INDEX = "CREATE INDEX IF NOT EXISTS embeddings_hnsw ON embeddings USING hnsw (vector halfvec_cosine_ops)"
