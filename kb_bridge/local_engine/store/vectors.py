"""The in-memory vector index: normalised float32 rows, brute-force cosine similarity with numpy.

Brute force is exact and fast enough here: 10k x 384 is one 15 MB matrix-vector product (well under a
millisecond); 100k about 10 ms on two cores. The SQLite store keeps the vectors (table `embeddings`); this
matrix is a cache of them, loaded when the model is ready and changed only together with the database,
under the store's write lock. Only this module and the embedder import numpy, so the engine runs without
the `engine` extra.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

import numpy as np

_INITIAL_CAPACITY = 1024


def to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


class VectorIndex:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._lock = threading.Lock()
        self._matrix = np.zeros((_INITIAL_CAPACITY, dim), dtype=np.float32)
        self._chunk_ids = np.zeros(_INITIAL_CAPACITY, dtype=np.int64)
        self._doc_ids = np.zeros(_INITIAL_CAPACITY, dtype=np.int64)
        self._row_of: dict[int, int] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, chunk_ids: Sequence[int], doc_ids: Sequence[int], vectors: np.ndarray) -> None:
        """Add (or replace) rows. `vectors` must already be normalised."""
        if len(chunk_ids) == 0:
            return
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(chunk_ids), self.dim)
        with self._lock:
            self._remove_locked(chunk_ids)
            self._reserve(self._count + len(chunk_ids))
            start, end = self._count, self._count + len(chunk_ids)
            self._matrix[start:end] = vectors
            self._chunk_ids[start:end] = chunk_ids
            self._doc_ids[start:end] = doc_ids
            for offset, chunk_id in enumerate(chunk_ids):
                self._row_of[int(chunk_id)] = start + offset
            self._count = end

    def remove(self, chunk_ids: Iterable[int]) -> None:
        with self._lock:
            self._remove_locked(chunk_ids)

    def vector_of(self, chunk_id: int) -> np.ndarray | None:
        with self._lock:
            row = self._row_of.get(chunk_id)
            return None if row is None else self._matrix[row].copy()

    def search(
        self,
        query: np.ndarray,
        k: int,
        allowed_documents: Sequence[int] | None = None,
        exclude_chunk: int | None = None,
        exclude_document: int | None = None,
    ) -> list[tuple[int, float]]:
        """The k most similar chunks as (chunk_id, cosine), best first, among the allowed documents.

        Filtering happens before the cut to k, so a filter never empties a result that has matches.
        """
        with self._lock:
            n = self._count
            if n == 0 or k <= 0:
                return []
            scores = self._matrix[:n] @ np.asarray(query, dtype=np.float32)
            keep = np.ones(n, dtype=bool)
            if allowed_documents is not None:
                keep &= np.isin(self._doc_ids[:n], np.asarray(allowed_documents, dtype=np.int64))
            if exclude_document is not None:
                keep &= self._doc_ids[:n] != exclude_document
            if exclude_chunk is not None:
                keep &= self._chunk_ids[:n] != exclude_chunk
            rows = np.flatnonzero(keep)
            if rows.size == 0:
                return []
            candidate_scores = scores[rows]
            if rows.size > k:
                best = np.argpartition(-candidate_scores, k - 1)[:k]
                rows, candidate_scores = rows[best], candidate_scores[best]
            order = np.argsort(-candidate_scores, kind="stable")
            return [(int(self._chunk_ids[rows[i]]), float(candidate_scores[i])) for i in order]

    def similarities(self, query: np.ndarray, chunk_ids: Iterable[int]) -> dict[int, float]:
        """The cosine of the query with each of these chunks; chunks without a vector are left out."""
        with self._lock:
            found = [(chunk_id, self._row_of[chunk_id]) for chunk_id in chunk_ids if chunk_id in self._row_of]
            if not found:
                return {}
            scores = self._matrix[[row for _, row in found]] @ np.asarray(query, dtype=np.float32)
        return {chunk_id: float(score) for (chunk_id, _), score in zip(found, scores, strict=True)}

    def _reserve(self, size: int) -> None:
        capacity = len(self._chunk_ids)
        if size <= capacity:
            return
        while capacity < size:
            capacity *= 2
        matrix = np.zeros((capacity, self.dim), dtype=np.float32)
        matrix[: self._count] = self._matrix[: self._count]
        self._matrix = matrix
        self._chunk_ids = np.resize(self._chunk_ids, capacity)
        self._doc_ids = np.resize(self._doc_ids, capacity)

    def _remove_locked(self, chunk_ids: Iterable[int]) -> None:
        # Swap each removed row with the last one: O(1) per row, no gaps to skip at search time.
        for chunk_id in chunk_ids:
            row = self._row_of.pop(int(chunk_id), None)
            if row is None:
                continue
            last = self._count - 1
            if row != last:
                moved = int(self._chunk_ids[last])
                self._matrix[row] = self._matrix[last]
                self._chunk_ids[row] = moved
                self._doc_ids[row] = self._doc_ids[last]
                self._row_of[moved] = row
            self._count = last
