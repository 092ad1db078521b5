"""The vector index: every chunk's embedding, searchable by cosine similarity, by usearch (HNSW).

Below `EXACT_BELOW` vectors (KB_ENGINE_EXACT_SEARCH_BELOW) a search compares the query with every vector: exact, and about a millisecond
at that size, so the graph would not pay for itself in quality. Above it the HNSW graph answers
approximately (recall@10 against exact search: docs/benchmarks.md). A search restricted to some chunks
(a filter, such as a collection) compares exactly with their vectors when they are few (`EXACT_SUBSET`);
otherwise it asks the graph for more than it needs, keeps the allowed ones and falls back to exact search if
too few remain. Vectors are held as float16: half the memory of float32 (about 0.8 GB for a million of
dimension 384) with cosines equal to three decimals.

It is a copy derived from the store's table of vectors, kept in step by the store (store/derived.py):
`save` writes it atomically with the position in the store's change log it reaches, `restore` reads it back
and the store replays the log from there.

Searches run concurrently with each other and with `save`; `add` and `remove` wait for running searches and
hold new ones off (usearch's Python wrapper does not promise that a search and a removal may overlap).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from usearch.index import Index

from .base import Ranking

EXACT_BELOW = 20_000
EXACT_SUBSET = 20_000
# The graph that meets recall@10 0.98 at a million vectors (docs/benchmarks.md, "ANN recall@10 at a million:
# how the graph got there"). A graph saved with other links is rebuilt at start (`restore`).
CONNECTIVITY = 32
EXPANSION_ADD = 128
EXPANSION_SEARCH = 512
# A filtered search asks the graph for this many times the share of the index it needs.
OVERSAMPLE = 4
# usearch's cosines can reorder near-tied neighbours (docs/benchmarks.md, same section), so every search takes
# RESCORE times the candidates it needs and ranks them by the exact float32 product of their stored vectors:
# the scores are then the numbers `similarities` gives.
RESCORE = 2
_MAX_ASK = 20_000
MANIFEST_SUFFIX = ".json"


def to_blob(vector: np.ndarray) -> bytes:
    """The stored form of a vector: float32, little-endian."""
    return np.asarray(vector, dtype="<f4").tobytes()


def from_blobs(blobs: Sequence[bytes], dim: int) -> np.ndarray:
    return np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), dim)


class _SharedLock:
    """Many readers or one writer."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._readers = 0
        self._writing = False

    @contextmanager
    def reading(self) -> Iterator[None]:
        with self._condition:
            self._condition.wait_for(lambda: not self._writing)
            self._readers += 1
        try:
            yield
        finally:
            with self._condition:
                self._readers -= 1
                self._condition.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._condition:
            self._condition.wait_for(lambda: not self._writing)
            self._writing = True
            self._condition.wait_for(lambda: self._readers == 0)
        try:
            yield
        finally:
            with self._condition:
                self._writing = False
                self._condition.notify_all()


class VectorIndex:
    def __init__(self, dim: int, index: Index | None = None, exact_below: int = EXACT_BELOW) -> None:
        self.dim = dim
        self.exact_below = exact_below
        if index is None:  # not `index or`: an empty usearch Index is falsy
            index = Index(ndim=dim, metric="cos", dtype="f16", connectivity=CONNECTIVITY,
                          expansion_add=EXPANSION_ADD, expansion_search=EXPANSION_SEARCH)
        self._index = index
        self._lock = _SharedLock()

    def __len__(self) -> int:
        return len(self._index)

    # --- changes ---------------------------------------------------------------------------------------------

    def add(self, chunk_ids: Sequence[int], vectors: np.ndarray, threads: int = 1) -> None:
        """Add or replace normalised vectors. `threads` 0 uses every core (a rebuild); 1 leaves the others
        to the model (ingestion)."""
        if len(chunk_ids) == 0:
            return
        keys = np.asarray(chunk_ids, dtype=np.uint64)
        matrix = np.asarray(vectors, dtype=np.float32).reshape(len(keys), self.dim)
        with self._lock.writing():
            present = keys[[bool(self._index.contains(int(key))) for key in keys]]
            if len(present):
                self._index.remove(present)
            self._index.add(keys, matrix, threads=threads)

    def remove(self, chunk_ids: Iterable[int]) -> None:
        keys = [int(key) for key in chunk_ids]
        if not keys:
            return
        with self._lock.writing():
            present = [key for key in keys if self._index.contains(key)]
            if present:
                self._index.remove(np.asarray(present, dtype=np.uint64))

    # --- reading ---------------------------------------------------------------------------------------------

    def vector_of(self, chunk_id: int) -> np.ndarray | None:
        found, matrix = self.vectors_of([chunk_id])
        return matrix[0] if found else None

    def vectors_of(self, chunk_ids: Sequence[int]) -> tuple[list[int], np.ndarray]:
        """(the ids that have a vector, their vectors as a float32 matrix)."""
        with self._lock.reading():
            found = [int(chunk_id) for chunk_id in chunk_ids if self._index.contains(int(chunk_id))]
            if not found:
                return [], np.zeros((0, self.dim), dtype=np.float32)
            matrix = self._index.get(np.asarray(found, dtype=np.uint64))
        return found, np.asarray(matrix, dtype=np.float32).reshape(len(found), self.dim)

    def similarities(self, query: np.ndarray, chunk_ids: Iterable[int]) -> dict[int, float]:
        """The cosine of the query with each of these chunks; chunks without a vector are left out."""
        found, matrix = self.vectors_of(list(chunk_ids))
        if not found:
            return {}
        scores = _cosines(matrix, query)
        return {chunk_id: float(score) for chunk_id, score in zip(found, scores, strict=True)}

    def search(self, query: np.ndarray, k: int, allowed: Sequence[int] | None = None,
               excluded: Collection[int] = ()) -> Ranking:
        """The k most similar chunks as (chunk_id, cosine), best first, among `allowed` (all when None),
        never one of `excluded`. Filters apply before the cut to k."""
        total = len(self)
        if k <= 0 or total == 0:
            return []
        if allowed is not None and len(allowed) <= EXACT_SUBSET:
            return self._exact_among([c for c in allowed if c not in excluded], query, k)
        share = 1.0 if allowed is None else max(len(allowed) / total, 1e-6)
        wanted = (k + len(excluded)) * RESCORE
        ask = min(total, _MAX_ASK, max(wanted, int(wanted * (1 if allowed is None else OVERSAMPLE / share))))
        allowed_set = set(allowed) if allowed is not None else None
        with self._lock.reading():
            matches = self._index.search(np.asarray(query, dtype=np.float32), ask, exact=total < self.exact_below,
                                         threads=1)
        candidates = [int(key) for key in matches.keys
                      if int(key) not in excluded and (allowed_set is None or int(key) in allowed_set)]
        ranking = self._exact_among(candidates, query, k)
        if len(ranking) < k and allowed is not None and ask < total:
            return self._exact_among([c for c in allowed if c not in excluded], query, k)
        return ranking

    def _exact_among(self, chunk_ids: Sequence[int], query: np.ndarray, k: int) -> Ranking:
        found, matrix = self.vectors_of(chunk_ids)
        if not found:
            return []
        scores = _cosines(matrix, query)
        best = np.argpartition(-scores, k - 1)[:k] if len(found) > k else np.arange(len(found))
        # Equal scores by the lower chunk id, as the API promises and PostgreSQL answers: usearch's own order
        # (the graph's) put the newest of identical notes first.
        ids = np.asarray(found, dtype=np.int64)
        order = best[np.lexsort((ids[best], -scores[best]))]
        return [(found[i], float(scores[i])) for i in order]

    # --- on disk ---------------------------------------------------------------------------------------------

    def save(self, path: Path, identity: dict[str, object]) -> None:
        """Write the index, then its manifest (`identity`: the database, the model and the log position the
        vectors reach), each atomically. A crash between the two leaves a manifest whose count does not
        match the index, which `restore` refuses."""
        tmp, tmp_manifest = temporary_files(path)
        try:
            with self._lock.reading():
                self._index.save(str(tmp))
                count = len(self._index)
            _fsync(tmp)
            os.replace(tmp, path)
            tmp_manifest.write_text(json.dumps({**identity, "dim": self.dim, "count": count}))
            _fsync(tmp_manifest)
            os.replace(tmp_manifest, path.with_name(path.name + MANIFEST_SUFFIX))
        except BaseException:
            # A save cut short by a full disk leaves as much of the index as fitted: the space it holds is
            # what the database's next writes need.
            remove_temporary_files(path)
            raise

    @classmethod
    def restore(cls, path: Path, identity: dict[str, object], dim: int,
                exact_below: int = EXACT_BELOW) -> VectorIndex | None:
        """The index saved at `path` if its manifest matches `identity` (every key but the position), it is
        whole and its graph has this version's connectivity; else None (the caller rebuilds)."""
        manifest = saved_manifest(path)
        if manifest.get("dim") != dim or any(manifest.get(key) != value for key, value in identity.items()):
            return None
        try:
            index = Index.restore(str(path))
        except (OSError, ValueError, RuntimeError):
            return None
        if index is None or len(index) != manifest.get("count") or index.ndim != dim \
                or index.connectivity != CONNECTIVITY:
            return None
        index.expansion_search = EXPANSION_SEARCH  # type: ignore[misc]  # the stub lacks the property's setter
        return cls(dim, index, exact_below)


def _cosines(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Each row's product with the query, summed the same way for every row: a BLAS product (`@`) sums rows
    in blocks and a leftover row another way, so identical vectors scored a unit in the last place apart,
    and which came first depended on where they sat in the matrix (not on their chunk ids)."""
    return np.einsum("ij,j->i", matrix, np.asarray(query, dtype=np.float32))


def temporary_files(path: Path) -> tuple[Path, Path]:
    """Where `save` writes the index and its manifest before moving them in place."""
    return path.with_name(path.name + ".tmp"), path.with_name(path.name + MANIFEST_SUFFIX + ".tmp")


def remove_temporary_files(path: Path) -> None:
    """Remove what a save that failed, or was killed, left (as large as the index: 0.8 GB a million)."""
    for tmp in temporary_files(path):
        tmp.unlink(missing_ok=True)


def saved_manifest(path: Path) -> dict[str, object]:
    try:
        return dict(json.loads(path.with_name(path.name + MANIFEST_SUFFIX).read_text()))
    except (OSError, ValueError):
        return {}


def _fsync(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())
