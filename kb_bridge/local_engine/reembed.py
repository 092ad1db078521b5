"""`kb-bridge engine --reembed`: embed every stored chunk again with the model in this engine's precision.

For a store whose vectors were made in a number format too far from the current one (the engine says so
at start: embedding/store_precision.py). It runs instead of serving, with the data directory locked (so no
engine serves it meanwhile), and replaces vectors in place, in chunk-id order, a window at a time: search
works with a mix of old and new vectors at any point. After each window the last chunk id done is
recorded in `meta.reembed_progress` with the format it is for, so an interrupted run (Ctrl-C, a crash)
continues after that chunk when run again with the same format; another format starts over. At the end
the store's writers are reset to this engine alone and the progress record removed.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from .config import EngineConfig
from .datadir import lock_data_dir
from .embedding import store_precision
from .embedding.embedder import Embedder, EmbedderSlot, start_embedder
from .embedding.runtime import load_onnxruntime_first
from .errors import ConfigError
from .ingest.chunking import EMBEDDING_INPUT, embedding_input
from .store.backends import open_store

if TYPE_CHECKING:
    from .progress import Progress

    from .store.base import Store

logger = logging.getLogger(__name__)

PROGRESS_KEY = "reembed_progress"
WINDOW = 256  # chunks read, embedded and written at a time: the most a resumed run does again


def reembed(config: EngineConfig, progress: Progress, embedder: Embedder | None = None) -> int:
    """Re-embed every chunk of the configured store; returns how many this run embedded. `embedder` is an
    already loaded model (tests); otherwise the config's is loaded, in the foreground."""
    lock = lock_data_dir(config.data_dir)
    try:
        load_onnxruntime_first(config.embedder, config.runtime)  # before the store imports usearch
        store = open_store(config)
        store.open()
        try:
            embedder = embedder or _load(config)
            store.use_embeddings(f"{embedder.name}/{embedder.dim}/{EMBEDDING_INPUT}", embedder.dim)
            return run(store, embedder, progress)
        finally:
            store.close()
    finally:
        lock.close()


def run(store: Store, embedder: Embedder, progress: Progress) -> int:
    target = store_precision.writer_of(embedder).as_json()
    saved = json.loads(store.read_meta(PROGRESS_KEY) or "null")
    after = int(saved["after"]) if saved and saved.get("writer") == target else 0
    remaining = store.count_chunks_after(after)
    if after:
        progress.say(f"continuing after chunk {after}: {remaining} chunk(s) to go")
    progress.phase(f"re-embedding with {embedder.name} ({target['runtime']}, {target['precision']})",
                   remaining, "chunks")
    done = 0
    while rows := store.chunks_after(after, WINDOW):
        vectors = embedder.embed_documents([embedding_input(title, text) for _, _, title, text in rows])
        store.add_vectors([row[0] for row in rows], vectors)
        after = rows[-1][0]
        store.write_meta(PROGRESS_KEY, json.dumps({"writer": target, "after": after}))
        done += len(rows)
        progress.advance(len(rows))
    store_precision.reset(store, embedder)
    store.write_meta(PROGRESS_KEY, None)
    progress.close()
    logger.info("re-embedded %d chunk(s) with %s/%s", done, target["runtime"], target["precision"])
    return done


def _load(config: EngineConfig) -> Embedder:
    slot = EmbedderSlot()
    start_embedder(slot, config.embedder, config.embed_batch_size, background=False,
                   query_precision=config.query_precision, query_threads=config.query_threads,
                   device=config.device, document_precision=config.document_precision,
                   document_workers=config.embed_workers, runtime=config.runtime)
    embedder = slot.current()
    if embedder is None:
        raise ConfigError(f"--reembed needs the embedding model: {slot.reason}")
    return embedder
