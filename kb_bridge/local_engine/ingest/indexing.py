"""Turning text into what the store keeps: chunks and their vectors, and the writes that use them.

The slow part (chunking, embedding) runs outside any transaction; the store then writes document, chunks
and vectors in one transaction (store/base.py). A chunk whose title and text are already
stored with a vector reuses it: the model read the same input.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from ..clock import now_iso
from ..embedding.embedder import EmbedderSlot
from ..errors import Conflict, IngestionError, PreconditionFailed
from ..store.base import JSON, PreparedChunks, Store, check_note, text_sha256
from .chunking import ChunkingPolicy, chunk_text, embedding_input
from .notes import derive_title

if TYPE_CHECKING:
    import numpy as np

    from ..embedding.embedder import Embedder

logger = logging.getLogger(__name__)

# How often a PATCH that leaves a field out is tried when other updates overtake it (only another
# replica's can, after the first: see update_note).
UPDATE_ATTEMPTS = 5


class Indexer:
    """Chunks and embeds text for a store; edits notes and embeds stored chunks that lack a vector."""

    def __init__(self, store: Store, embedders: EmbedderSlot, chunking: ChunkingPolicy, batch_size: int) -> None:
        self.store = store
        self.embedders = embedders
        self.chunking = chunking
        self.batch_size = batch_size

    def chunk(self, text: str, doc_type: str) -> list[str]:
        texts = chunk_text(text, doc_type, self.chunking)
        if not texts:
            raise IngestionError("the document has no text to index")
        return texts

    def prepare(self, title: str, text: str, doc_type: str) -> PreparedChunks:
        """Chunks and vectors of one text, embedded here (a note's update; the worker batches jobs itself)."""
        texts = self.chunk(text, doc_type)
        embedder = self.embedders.current()
        vectors = self.embed(embedder, [(title, chunk) for chunk in texts]) if embedder is not None else None
        return PreparedChunks(texts, vectors)

    def reuse(self, dim: int, chunks: Sequence[tuple[str, str]]) -> tuple[np.ndarray, list[int]]:
        """A matrix with the stored vectors of (title, text) chunks already embedded, and the rows still to
        embed."""
        import numpy as np

        keys = [(title, text_sha256(text)) for title, text in chunks]
        stored = self.store.stored_vectors(keys)
        vectors = np.zeros((len(chunks), dim), dtype=np.float32)
        missing: list[int] = []
        for row, key in enumerate(keys):
            blob = stored.get(key)
            if blob is not None and len(blob) == dim * 4:
                vectors[row] = np.frombuffer(blob, dtype="<f4")
            else:
                missing.append(row)
        return vectors, missing

    def embed(self, embedder: Embedder, chunks: Sequence[tuple[str, str]]) -> np.ndarray:
        """Vectors for (title, text) chunks: stored ones reused, the others embedded in batches."""
        vectors, missing = self.reuse(embedder.dim, chunks)
        for start in range(0, len(missing), self.batch_size):
            rows = missing[start : start + self.batch_size]
            vectors[rows] = embedder.embed_documents([embedding_input(*chunks[row]) for row in rows])
        return vectors

    def update_note(self, doc_id: int, text: str | None, title: str | None, if_match: Collection[str] | None,
                    changed_by: str | None = None) -> JSON:
        """Replace a note's text and/or title: re-chunk, re-embed, keep id and created_at, bump version.

        `if_match` is the versions the client accepts (from If-Match; "*" accepts any), or None for no
        condition. Checked before the (slow) embedding and again by the store when it writes.

        A field left out is the one read here, before the store's lock: the write is conditional on the
        version read (else a title-only update would write back an older text). An update overtaken that
        way is read and prepared again, holding off this process's other writes the while, so that it cannot
        be overtaken again but by another replica.
        """
        overtaken = False
        for _ in range(UPDATE_ATTEMPTS):
            with self.store.writes_held() if overtaken else contextlib.nullcontext():
                current = self.store.get_document(doc_id, detail=True)
                check_note(current["doc_type"], current["version"], doc_id, if_match)
                new_text = text if text is not None else str(current["content"])
                new_title = title if title is not None else str(current["title"])
                if title is None and text is not None and current["title"] == derive_title(str(current["content"])):
                    new_title = derive_title(text)  # the title was derived from the old text: derive it anew
                if new_text == current["content"] and new_title == current["title"]:
                    # Nothing changes, so no version: a repeated update (kb_update_note is idempotent) would
                    # otherwise push a real earlier version out of the kept ones and mark the note updated.
                    return {k: v for k, v in current.items() if k not in ("content", "chunks")}
                prepared = self.prepare(new_title, new_text, "note")
                guard = if_match if text is not None and title is not None else {str(current["version"])}
                try:
                    return self.store.replace_note(doc_id, new_title, new_text, prepared, guard, now_iso(), changed_by)
                except PreconditionFailed:
                    if guard is if_match:
                        raise
                    overtaken = True  # the client's If-Match is checked against the new version next time
        raise Conflict(f"note {doc_id} kept changing while this update was prepared; send it again")

    def backfill(self, embedder: Embedder, limit: int) -> int:
        """Embed up to `limit` stored chunks that have no vector (stored before the model was available)."""
        rows = self.store.chunks_without_vectors(limit)
        if not rows:
            return 0
        vectors = self.embed(embedder, [(row[2], row[3]) for row in rows])
        self.store.add_vectors([row[0] for row in rows], vectors)
        return len(rows)
