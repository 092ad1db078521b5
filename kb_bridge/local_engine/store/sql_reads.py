"""The reads that both SQL stores make the same way: one consistent snapshot, one function of the backend's
own SQL module (`sqlite/documents.py` and `sqlite/jobs.py`, or their `postgres/` twins, which share names
and signatures), and full-text search in the derived tantivy index with the filters only SQL can apply
resolved to document ids first. A backend mixes this in and writes only what differs."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from ..errors import NotFound
from . import adjacent
from .base import JSON, DocumentFilter, Passage, QueryTerms, Ranking
from .text_index import ceiling_of

if TYPE_CHECKING:
    from .derived import DerivedIndexes, Transactions

# Filters the text index cannot apply itself; the store resolves them to document ids first (with the
# documents' index on source_path), so BM25 ranks only those documents' chunks and the top k come back
# whenever k such chunks match. Time bounds the index applies itself (text_index.py, TIME_FIELDS).
SQL_ONLY_FILTERS = ("source_path",)


class SqlReads:
    kind: str
    db: Transactions
    indexes: DerivedIndexes
    sql_documents: ModuleType
    sql_jobs: ModuleType
    sql_history: ModuleType

    def get_job(self, job_id: int) -> JSON:
        with self.db.snapshot() as conn:
            return self.sql_jobs.get_job(conn, job_id)

    def list_jobs(self, status: str | None, limit: int, offset: int) -> tuple[list[JSON], int]:
        with self.db.snapshot() as conn:
            return self.sql_jobs.list_jobs(conn, status, limit, offset)

    def queue_counts(self) -> dict[str, int]:
        with self.db.snapshot() as conn:
            return self.sql_jobs.queue_counts(conn)

    def get_document(self, doc_id: int, detail: bool = False) -> JSON:
        with self.db.snapshot() as conn:
            read = self.sql_documents.get_document_detail if detail else self.sql_documents.get_document
            return read(conn, doc_id)

    def list_versions(self, doc_id: int) -> list[JSON]:
        with self.db.snapshot() as conn:
            document = self.sql_documents.get_document(conn, doc_id)
            current: JSON = {key: document[key] for key in ("version", "title", "tags", "updated_at", "changed_by")}
            current["current"] = True
            return [current, *self.sql_history.earlier_versions(conn, doc_id)]

    def get_version(self, doc_id: int, version: int) -> JSON:
        with self.db.snapshot() as conn:
            document = self.sql_documents.get_document_detail(conn, doc_id)
            if document["version"] == version:
                document["current"] = True
                return document
            found = self.sql_history.earlier_version(conn, doc_id, version)
        if found is None:
            raise NotFound(f"document {doc_id} has no version {version} (kept: the current one and up to the "
                           "KB_ENGINE_KEEP_VERSIONS before it)")
        # The document's own fields, with the version's title, tags, text and time; no chunks (search
        # only ever finds the current version).
        return {**{k: v for k, v in document.items() if k not in ("content", "chunks", "chunk_count", "size_bytes", "sha256")}, **found, "chunks": []}

    def original(self, doc_id: int) -> tuple[str | None, str, Iterator[bytes]]:
        with self.db.snapshot() as conn:
            found = self.sql_documents.read_original(conn, doc_id)
            if found is None:
                self.sql_documents.get_document(conn, doc_id)  # NotFound for a missing document
                raise NotFound(f"document {doc_id} has no original file (a note, or a file stored before engine 3.6)")
        filename, content_type, size = found

        def pieces() -> Iterator[bytes]:
            # One read transaction while the bytes stream: every piece from the same version.
            with self.db.snapshot() as conn:
                yield from self.sql_documents.original_pieces(conn, doc_id, size)

        return filename, content_type, pieces()

    def list_documents(self, where: DocumentFilter, limit: int, offset: int,
                       after: tuple[str, int] | None = None) -> tuple[list[JSON], int]:
        with self.db.snapshot() as conn:
            return self.sql_documents.list_documents(conn, where, limit, offset, after)

    def list_tags(self, prefix: str | None, within: str | None = None) -> list[JSON]:
        with self.db.snapshot() as conn:
            return self.sql_documents.list_tags(conn, prefix, within)

    def counts(self) -> dict[str, int]:
        with self.db.snapshot() as conn:
            return self.sql_documents.counts(conn)

    def get_chunks(self, chunk_ids: Sequence[int]) -> dict[int, JSON]:
        with self.db.snapshot() as conn:
            return self.sql_documents.get_chunks(conn, chunk_ids)

    def stored_vectors(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], bytes]:
        with self.db.snapshot() as conn:
            return self.sql_documents.stored_vectors_by_text(conn, keys)

    def chunks_without_vectors(self, limit: int) -> list[tuple[int, int, str, str]]:
        with self.db.snapshot() as conn:
            return [tuple(row) for row in self.sql_documents.chunks_without_vectors(conn, limit)]

    def chunks_after(self, after: int, limit: int) -> list[tuple[int, int, str, str]]:
        with self.db.snapshot() as conn:
            return [tuple(row) for row in self.sql_documents.chunks_after(conn, after, limit)]

    def count_chunks_after(self, after: int) -> int:
        with self.db.snapshot() as conn:
            return int(self.sql_documents.count_chunks_after(conn, after))

    def read_meta(self, key: str) -> str | None:
        with self.db.snapshot() as conn:
            value = self.sql_documents.read_meta(conn, key)
            return None if value is None else str(value)

    def search_text(self, query: str, where: DocumentFilter, limit: int, filter_idf: bool = False,
                    terms: QueryTerms | None = None) -> Ranking:
        text = self.indexes.text
        if text is None:
            return []
        within = dict(terms.weights) if terms is not None else None
        return text.search(query, where, limit, self._sql_allowed(where), filter_idf, within)

    def query_terms(self, query: str, where: DocumentFilter | None = None, filter_idf: bool = False) -> QueryTerms:
        text = self.indexes.text
        if text is None:
            return QueryTerms()
        if where is None or not filter_idf:
            weights = text.term_weights(query)
        else:
            weights = text.term_weights(query, where, self._sql_allowed(where), filter_idf)
        return QueryTerms(tuple(weights), ceiling_of(weights))

    def text_tokens(self, chunk_ids: Sequence[int]) -> dict[int, list[str]]:
        text = self.indexes.text
        if text is None or not chunk_ids:
            return {}
        with self.db.snapshot() as conn:
            texts = self.sql_documents.chunk_texts(conn, chunk_ids)
        return {chunk_id: text.analyze(body) for chunk_id, body in texts.items()}

    def _sql_allowed(self, where: DocumentFilter) -> list[int] | None:
        """The documents that the filter's criteria the text index does not hold allow (None: no such criteria)."""
        if not any(getattr(where, name) is not None for name in SQL_ONLY_FILTERS):
            return None
        with self.db.snapshot() as conn:
            return list(self.sql_documents.matching_document_ids(conn, where))

    def passages(self, query: str, texts: Sequence[str], max_chars: int) -> list[Passage | None]:
        text = self.indexes.text
        return text.passages(query, texts, max_chars) if text is not None else [None] * len(texts)

    def collection_notes(self, chunk_ids: Sequence[int]) -> set[int]:
        mark = "%s" if self.kind == "postgresql" else "?"
        with self.db.snapshot() as conn:
            return adjacent.collection_notes(conn, chunk_ids, mark, choose_side=self.kind == "sqlite")

    def adjacent_notes(self, chunk_ids: Sequence[int], where: DocumentFilter, reach: int = 1) -> dict[int, dict[int, int]]:
        mark = "%s" if self.kind == "postgresql" else "?"
        with self.db.snapshot() as conn:
            return adjacent.adjacent_notes(conn, chunk_ids, self.sql_documents.where_sql(where), mark, reach)
