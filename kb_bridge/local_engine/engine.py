"""The Engine: everything one engine process holds, built and started by create_app, closed at exit.

It owns the data directory (an exclusive lock, so two processes never run jobs on one database), the
database, the embedder slot, the in-memory vector index and the ingestion worker. `write_lock`
serialises every write that also changes the vector index, so index and database change in one order.
"""

from __future__ import annotations

import logging
import threading
from typing import IO, TYPE_CHECKING

from . import jobs, migrations
from .chunking import EMBEDDING_INPUT, ChunkingPolicy
from .clock import seconds_ago_iso
from .config import EngineConfig
from .datadir import lock_data_dir
from .db import Database
from .embedder import Embedder, EmbedderSlot, start_embedder
from .uploads import Staging
from .worker import IngestionWorker

if TYPE_CHECKING:
    from .vectors import VectorIndex

logger = logging.getLogger(__name__)

API_VERSION = "3.2.0"
WORKER_STOP_SECONDS = 20.0


class Engine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.db = Database(config.database_path)
        self.staging = Staging(config.uploads_dir)
        self.chunking = ChunkingPolicy(max_chars=config.chunk_chars, overlap=config.chunk_overlap)
        self.embedders = EmbedderSlot()
        self.vectors: VectorIndex | None = None
        self.write_lock = threading.RLock()
        self.worker = IngestionWorker(self)
        self._lock_file: IO[str] | None = None

    def start(self, embedder: Embedder | None = None) -> None:
        """Open and upgrade the database, resume the queue, load the model, start the worker.

        `embedder` installs an already loaded model (tests share one); otherwise the config decides.
        """
        self._lock_file = lock_data_dir(self.config.data_dir)
        try:
            self._open_store()
            self.embedders.on_ready(self._prepare_vectors)
            if embedder is not None:
                self.embedders.use(embedder)
            else:
                start_embedder(self.embedders, self.config.embedder, self.config.embed_batch_size,
                               background=not self.config.wait_for_model,
                               query_precision=self.config.query_precision,
                               query_threads=self.config.query_threads)
        except BaseException:
            self.close()
            raise
        self.worker.start()

    def _open_store(self) -> None:
        """Upgrade the schema, put interrupted jobs back in the queue, drop uploads no job needs."""
        self.staging.prepare()
        version = migrations.migrate(self.db.connection())
        with self.db.write() as conn:
            resumed = jobs.requeue_running(conn)
            jobs.forget_idempotency_keys_before(conn, seconds_ago_iso(self.config.idempotency_ttl_seconds))
            in_use = jobs.staged_paths_in_use(conn)
        if resumed:
            logger.info("resuming %d job(s) that were running when the engine stopped", resumed)
        self.staging.sweep(in_use)
        logger.info("database %s at schema version %d", self.config.database_path, version)

    def close(self) -> None:
        if not self.worker.stop(WORKER_STOP_SECONDS):
            logger.warning("the ingestion worker did not stop in time; its job resumes at the next start")
        self.db.close()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    def vector_search_ready(self) -> bool:
        return self.embedders.current() is not None and self.vectors is not None

    def search_modes(self) -> list[str]:
        return ["hybrid", "fts", "vector"] if self.vector_search_ready() else ["fts"]

    def _prepare_vectors(self, embedder: Embedder) -> None:
        """Load stored vectors into memory; drop them first if another model, or another kind of input, made them."""
        from .vectors import load_index

        identity = f"{embedder.name}/{embedder.dim}/{EMBEDDING_INPUT}"
        with self.write_lock:
            with self.db.write() as conn:
                row = conn.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
                if row is not None and row[0] != identity:
                    logger.warning("stored vectors were made by %s; re-embedding with %s", row[0], identity)
                    conn.execute("DELETE FROM embeddings")
                conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('embedding_model', ?)", (identity,))
            self.vectors = load_index(self.db.connection(), embedder.dim)
        logger.info("loaded %d stored vectors", len(self.vectors))
        self.worker.notify()
