"""Search: BM25 (fts), cosine similarity (vector), and their fusion (hybrid), over any Store.

Hybrid takes the best `candidates` of each signal, filtered the same way, and fuses them as fusion.py says
(a weighted sum of cosine and BM25 on an absolute scale by default; reciprocal rank fusion on request), then
adds context from adjacent notes of a collection (context.py) and, on request, diversity (diversity.py).
Each returned hit carries the passage that matched (snippets.py).
The BM25 query, its ceiling and the coverage and proximity of a memory's notes (term_evidence.py) run in
the request thread while the query is embedded on the query thread. The method, depth and weights come
from the config, tuned on SciFact and LoCoMo (docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

from ..config import EngineConfig
from ..embedding.embedder import EmbedderSlot
from ..errors import Conflict, NotFound, NotReady
from ..store.base import JSON, DocumentFilter, Ranking, Store
from .context import with_neighbours
from .diversity import diversify
from .fusion import Fusion
from .snippets import snippets
from .term_evidence import reweighed

if TYPE_CHECKING:
    import numpy as np

MODES = ("hybrid", "fts", "vector")


@dataclasses.dataclass(frozen=True)
class SearchRequest:
    query: str
    top_n: int = 10
    where: DocumentFilter = DocumentFilter()
    mode: str = "hybrid"


class Searcher:
    def __init__(self, store: Store, embedders: EmbedderSlot, config: EngineConfig) -> None:
        self._store = store
        self._embedders = embedders
        self._config = config
        self._fusion = Fusion(config.fusion, config.fts_weight, config.vector_weight, config.rrf_k,
                              config.memory_vector_share)

    def vectors_ready(self) -> bool:
        """Vector and hybrid search can run. The slot turns ready only after the store has taken the model's
        vectors (Engine registers that step as the slot's on_ready listener)."""
        return self._embedders.current() is not None

    def modes(self) -> list[str]:
        return list(MODES) if self.vectors_ready() else ["fts"]

    def search(self, request: SearchRequest) -> JSON:
        started = time.perf_counter()
        mode = request.mode if self.vectors_ready() else "fts"
        query_vector: Future[np.ndarray] | None = None
        if mode != "fts":
            embedder = self._embedders.current()
            assert embedder is not None  # vectors_ready() said so
            query_vector = embedder.submit_query(request.query)  # on the query thread, while BM25 runs here
        results = self._read(self._rank(request, mode, query_vector)[: request.top_n], request.where)
        passages = snippets(self._store, request.query, [str(hit["text"]) for hit in results])
        return {
            "query": request.query,
            "mode": mode,
            "took_ms": round((time.perf_counter() - started) * 1000, 3),
            "results": [{**hit, "snippet": snippet} for hit, snippet in zip(results, passages, strict=True)],
        }

    def _rank(self, request: SearchRequest, mode: str, query_vector: Future[np.ndarray] | None) -> Ranking:
        config = self._config
        depth = max(config.candidates, request.top_n) if mode == "hybrid" else request.top_n
        lexical: Ranking = []
        ceiling = 0.0
        memory: set[int] = set()
        if mode == "hybrid" and config.fusion == "convex":  # runs while the query is being embedded
            lexical, ceiling, memory = self._lexical(request, depth)
        elif mode != "vector":
            lexical = self._store.search_text(request.query, request.where, depth, config.filter_idf)
        if query_vector is None:
            return lexical
        vector = query_vector.result()
        semantic = self._store.search_vectors(vector, depth, request.where)
        if mode == "vector":
            return semantic
        if config.fusion == "convex" and config.memory_vector_share is not None:
            held = {chunk_id for chunk_id, _ in lexical}
            memory |= self._store.collection_notes([chunk_id for chunk_id, _ in semantic if chunk_id not in held])
        fused = self._fusion.fuse(lexical, ceiling, semantic, lambda chunk_ids: self._store.similarities(vector, chunk_ids),
                                  memory)
        # Rank fusion has no score for a non-candidate, nor a lexical part.
        if (config.neighbour_weight > 0 or config.neighbour_lexical_weight > 0) and config.fusion == "convex":
            # With the memory share, `memory` names every candidate that is a note kept in a collection, the only
            # chunks with neighbours: the others are not looked up (a corpus of files: no lookup at all).
            known = config.memory_vector_share is not None
            fused = with_neighbours(
                fused, max(config.neighbour_anchors, request.top_n), config.neighbour_weight,
                lambda chunk_ids: self._store.adjacent_notes([c for c in chunk_ids if not known or c in memory],
                                                             request.where, config.neighbour_reach),
                # Neighbours are notes of a collection: the memory share scores them.
                lambda chunk_ids: self._fusion.vector_only(self._store.similarities(vector, chunk_ids), memory=True),
                config.neighbour_lexical_weight, self._fusion.lexical_part(lexical, ceiling, memory),
                config.neighbour_decay,
            )
        if config.diversity > 0:
            fused = diversify(fused, request.top_n, config.diversity, self._vectors_of)
        return fused

    def _lexical(self, request: SearchRequest, depth: int) -> tuple[Ranking, float, set[int]]:
        """Hybrid (convex) search's BM25 candidates, their ceiling, and which of them are notes kept in a
        collection; those notes' scores corrected for coverage and proximity (term_evidence.py). Only such
        notes: on SciFact's long chunks it changed nDCG@10 by +0.001 for 6 ms more per search
        (docs/benchmarks.md, "Memory retrieval")."""
        config = self._config
        terms = self._store.query_terms(request.query, request.where, config.filter_idf)
        lexical = self._store.search_text(request.query, request.where, depth, config.filter_idf, terms)
        reweigh = config.coverage_power > 0 or config.proximity_weight > 0
        if not lexical or (config.memory_vector_share is None and not reweigh):
            return lexical, terms.ceiling, set()
        memory = self._store.collection_notes([chunk_id for chunk_id, _ in lexical])
        if reweigh and memory:
            lexical = reweighed(lexical, terms.ceiling, terms.weights, self._store.text_tokens(sorted(memory)),
                                config.coverage_power, config.proximity_weight, config.proximity_window)
        return lexical, terms.ceiling, memory

    def _vectors_of(self, chunk_ids: Sequence[int]) -> tuple[list[int], np.ndarray]:
        import numpy as np

        found = {chunk_id: v for chunk_id in chunk_ids if (v := self._store.vector_of(chunk_id)) is not None}
        return list(found), np.stack(list(found.values())) if found else np.zeros((0, 0), dtype=np.float32)

    def related(self, chunk_id: int, top_n: int, same_document: bool, where: DocumentFilter) -> JSON:
        """Chunks most similar to a stored chunk, by vector, among those `where` allows (3.16: the tags of
        `…/related?tag=`); other documents only unless same_document."""
        chunk = self._store.get_chunks([chunk_id]).get(chunk_id)
        if chunk is None:
            raise NotFound(f"chunk {chunk_id} not found")
        if not self.vectors_ready():
            if self._embedders.state == "loading":
                raise NotReady("the embedding model is still loading; retry in a few seconds")
            raise Conflict(f"this engine has no vectors ({self._embedders.reason}); related chunks need them")
        vector = self._store.vector_of(chunk_id)
        if vector is None:
            raise NotReady(f"chunk {chunk_id} has no vector yet; the engine is still embedding stored chunks")
        exclude_document = None if same_document else int(str(chunk["document_id"]))
        hits = self._store.search_vectors(vector, top_n, where=where, exclude_chunk=chunk_id,
                                          exclude_document=exclude_document)
        return {"results": self._read(hits, where)}

    def _read(self, ranked: Ranking, where: DocumentFilter) -> list[JSON]:
        """The ranked chunks as read from the store, with their scores. Read after ranking: a document deleted,
        re-tagged (moved to another collection) or re-dated since the indexes ranked it is left out rather than
        answered, as it now is, under a filter it no longer meets."""
        chunks = self._store.get_chunks([chunk_id for chunk_id, _ in ranked])
        return [{**chunks[chunk_id], "score": score} for chunk_id, score in ranked
                if chunk_id in chunks and where.allows(chunks[chunk_id])]
