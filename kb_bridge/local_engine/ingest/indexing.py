"""Turning text into what the store keeps: chunks and their vectors, and the writes that use them.

The slow part (chunking, embedding) runs outside any transaction; the store then writes document, chunks,
vectors and full-text rows in one transaction (store/base.py). A chunk whose title and text are already
stored with a vector reuses it: the model read the same input.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from ..clock import now_iso
from ..embedding.embedder import EmbedderSlot
from ..errors import IngestionError
from ..store.base import JSON, Abandoned, PreparedChunks, Store, check_note, text_sha256
from .chunking import ChunkingPolicy, chunk_text, embedding_input
from .notes import derive_title

if TYPE_CHECKING:
    import numpy as np

    from ..embedding.embedder import Embedder

logger = logging.getLogger(__name__)


class Indexer:
    """Chunks and embeds text for a store; edits notes and embeds stored chunks that lack a vector."""

    def __init__(self, store: Store, embedders: EmbedderSlot, chunking: ChunkingPolicy, batch_size: int) -> None:
        self.store = store
        self.embedders = embedders
        self.chunking = chunking
        self.batch_size = batch_size

    def prepare(self, title: str, text: str, doc_type: str, stop: threading.Event | None = None) -> PreparedChunks:
        texts = chunk_text(text, doc_type, self.chunking)
        if not texts:
            raise IngestionError("the document has no text to index")
        embedder = self.embedders.current()
        vectors = self.embed(embedder, [(title, chunk) for chunk in texts], stop) if embedder is not None else None
        return PreparedChunks(texts, vectors)

    def embed(self, embedder: Embedder, chunks: Sequence[tuple[str, str]], stop: threading.Event | None) -> np.ndarray:
        """Vectors for (title, text) chunks, in batches; Abandoned when `stop` is set between batches."""
        import numpy as np

        keys = [(title, text_sha256(text)) for title, text in chunks]
        stored = self.store.stored_vectors(keys)
        vectors = np.zeros((len(chunks), embedder.dim), dtype=np.float32)
        missing: list[int] = []
        for row, key in enumerate(keys):
            blob = stored.get(key)
            if blob is not None and len(blob) == embedder.dim * 4:
                vectors[row] = np.frombuffer(blob, dtype="<f4")
            else:
                missing.append(row)
        for start in range(0, len(missing), self.batch_size):
            if stop is not None and stop.is_set():
                raise Abandoned()
            rows = missing[start : start + self.batch_size]
            vectors[rows] = embedder.embed_documents([embedding_input(*chunks[row]) for row in rows])
        return vectors

    def update_note(self, doc_id: int, text: str | None, title: str | None, if_match: Collection[str] | None) -> JSON:
        """Replace a note's text and/or title: re-chunk, re-embed, keep id and created_at, bump version.

        `if_match` is the versions the client accepts (from If-Match; "*" accepts any), or None for no
        condition. Checked before the (slow) embedding and again by the store when it writes.
        """
        current = self.store.get_document(doc_id, detail=True)
        check_note(current["doc_type"], current["version"], doc_id, if_match)
        new_text = text if text is not None else str(current["content"])
        new_title = title if title is not None else str(current["title"])
        if title is None and text is not None and current["title"] == derive_title(str(current["content"])):
            new_title = derive_title(text)  # the title was derived from the old text: derive it anew
        prepared = self.prepare(new_title, new_text, "note")
        return self.store.replace_note(doc_id, new_title, new_text, prepared, if_match, now_iso())

    def backfill(self, embedder: Embedder, limit: int) -> int:
        """Embed up to `limit` stored chunks that have no vector (stored before the model was available)."""
        rows = self.store.chunks_without_vectors(limit)
        if not rows:
            return 0
        vectors = self.embed(embedder, [(row[2], row[3]) for row in rows], None)
        self.store.add_vectors([row[0] for row in rows], vectors)
        return len(rows)
