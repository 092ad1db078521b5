"""The Engine: everything one engine process holds, built and started by create_app, closed at exit.

It is the composition root: it owns the data directory (an exclusive lock, so two processes never run jobs
on one database), the store, the staging directory for uploads, the embedder slot, and the parts built on
them (intake, indexer, ingestion worker, searcher), and hands each part only what it needs.
"""

from __future__ import annotations

import logging
from typing import IO

from .clock import now_iso, seconds_ago_iso
from .config import EngineConfig
from .datadir import lock_data_dir
from .embedding import store_precision
from .embedding.embedder import Embedder, EmbedderSlot, start_embedder
from .embedding.runtime import load_onnxruntime_first
from .ingest.chunking import EMBEDDING_INPUT, ChunkingPolicy
from .ingest.indexing import Indexer
from .ingest.staging import Staging
from .ingest.submissions import Intake
from .ingest.file_reader import FileReader
from .ingest.worker import IngestionWorker
from .search.searcher import Searcher
from .store.backends import open_store

logger = logging.getLogger(__name__)

API_VERSION = "3.16"
WORKER_STOP_SECONDS = 20.0


class Engine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.store = open_store(config)
        self.staging = Staging(config.uploads_dir)
        self.embedders = EmbedderSlot()
        self.indexer = Indexer(
            self.store, self.embedders, ChunkingPolicy(max_chars=config.chunk_chars, overlap=config.chunk_overlap),
            config.embed_batch_size,
        )
        reader = FileReader(config.parse_timeout, config.parse_memory)
        self.worker = IngestionWorker(self.store, self.embedders, self.indexer, self.staging, reader)
        self.intake = Intake(self.store, self.staging, self.worker.notify, config.idempotency_ttl_seconds,
                             self.worker.cancel_reading)
        self.searcher = Searcher(self.store, self.embedders, config)
        self._lock_file: IO[str] | None = None

    def start(self, embedder: Embedder | None = None) -> None:
        """Open and upgrade the store, resume the queue, load the model, start the worker.

        `embedder` installs an already loaded model (tests share one); otherwise the config decides.
        """
        self._lock_file = lock_data_dir(self.config.data_dir)
        try:
            load_onnxruntime_first(self.config.embedder, self.config.runtime)  # before usearch: see there
            self._open_store()
            self.embedders.on_ready(self._use_embedder)
            if embedder is not None:
                self.embedders.use(embedder)
            else:
                start_embedder(self.embedders, self.config.embedder, self.config.embed_batch_size,
                               background=not self.config.wait_for_model,
                               query_precision=self.config.query_precision,
                               query_threads=self.config.query_threads, device=self.config.device,
                               document_precision=self.config.document_precision,
                               document_workers=self.config.embed_workers, runtime=self.config.runtime)
        except BaseException:
            self.close()
            raise
        self.worker.start()

    def _open_store(self) -> None:
        """Upgrade the schema, put interrupted jobs back in the queue, drop uploads no job needs."""
        self.staging.prepare()
        self.store.open()
        resumed, in_use = self.store.recover(seconds_ago_iso(self.config.idempotency_ttl_seconds), now_iso())
        if resumed:
            logger.info("resuming %d job(s) that were running when the engine stopped", resumed)
        self.staging.sweep(in_use)

    def close(self) -> None:
        if not self.worker.stop(WORKER_STOP_SECONDS):
            logger.warning("the ingestion worker did not stop in time; its job resumes at the next start")
        self.store.close()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    def _use_embedder(self, embedder: Embedder) -> None:
        """Serve the model's stored vectors (drop them first if another model, or another kind of input,
        made them); runs before the slot shows `ready`, so search never sees a model without its vectors."""
        identity = f"{embedder.name}/{embedder.dim}/{EMBEDDING_INPUT}"
        loaded = self.store.use_embeddings(identity, embedder.dim)
        logger.info("loaded %d stored vectors", loaded)
        store_precision.record(self.store, embedder)  # says so when they are too far from this engine's
        self.worker.notify()
