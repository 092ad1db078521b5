"""The full-text index of chunks: BM25 with top-k pruning, by tantivy.

SQLite's FTS5 scores every row that matches a query before it keeps the best: a common word at a million
chunks meant ranking hundreds of thousands of rows per query (68 ms p95 already at 100k). tantivy (Rust, the
library behind Quickwit) keeps posting lists in blocks with their best possible score and skips blocks that
cannot reach the current top k (block-max WAND); docs/benchmarks.md has its figures at a million chunks.

Each chunk is one tantivy document: `chunk` and `doc` ids, `body` (the document's title `title_repeats`
times, then the chunk: with 2, a title word weighs about twice a body word, as FTS5's column weight 2 did;
SciFact BM25 nDCG@10 0.701 against FTS5's 0.704), the document's tags and doc_type as untokenised
terms for filters, and its created_at and updated_at as milliseconds in fast fields, so a time bound is a
range over a column (0.7 ms per count at 100k chunks) rather than a set of document ids the database
resolved first (28-34 ms per count, and a filtered BM25 search counts once per word; docs/benchmarks.md,
"Search with a time bound"). Words are split on non-alphanumerics, lowercased and Porter-stemmed
(English), like FTS5's `porter unicode61` tokenizer before, in text brought to Unicode's NFKC form first
(store/normal_form.py: "ﬁle" and "file", an accent composed or combining, are one word).

The index is a copy derived from the store's tables, kept in step by the store (store/derived.py):
`commit(position)` records how far into the store's change log it reaches, in a manifest beside the index,
with the identity of the database it follows; `position` is None when it must be rebuilt.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import tantivy

from ..clock import epoch_millis
from ..errors import IndexWriteFailed
from .base import DocumentFilter, Passage, Ranking
from .normal_form import Folded, is_normal, normal
from .query_terms import query_words

logger = logging.getLogger(__name__)

ANALYZER = "kb_english"
MANIFEST = "kb-manifest.json"
# How the chunks are indexed: an index of another layout is rebuilt from the store. 2: the documents' times;
# 3: words in NFKC form.
LAYOUT = 3
# BM25 as tantivy computes it (k1 = 1.2, b = 0.75): a term's score tends to idf * (k1 + 1) as it repeats.
BM25_K1 = 1.2
_WRITER_HEAP = 64 * 1024 * 1024
_MAX_WORD = 40  # longer "words" are noise (hashes, base64) and are left out, as they would only bloat it
# The index's field for each document column a time bound names (DocumentFilter.time_bounds).
TIME_FIELDS = {"created_at": "created", "updated_at": "updated"}


# (chunk id, document id, title, text, doc_type, tags, created_at, updated_at): one chunk as the index holds
# it; the times as the store keeps them (clock.py).
ChunkRow = tuple[int, int, str, str, str, Sequence[str], str, str]



def _analyzer() -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(_MAX_WORD))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("chunk", indexed=True, fast=True)
    builder.add_integer_field("doc", indexed=True, fast=True)
    builder.add_text_field("body", tokenizer_name=ANALYZER)
    builder.add_text_field("tag", tokenizer_name="raw")
    builder.add_text_field("doc_type", tokenizer_name="raw")
    for field in TIME_FIELDS.values():
        builder.add_integer_field(field, fast=True)
    return builder.build()


class TextIndex:
    """One tantivy index in a directory of its own, written by one thread at a time (the store's writer)."""

    def __init__(self, directory: Path, database: str, title_repeats: int = 2) -> None:
        self.directory = directory
        self.title_repeats = title_repeats
        self._identity = {"layout": LAYOUT, "database": database, "title_repeats": title_repeats}
        self._schema = _schema()
        self._analyzer = _analyzer()
        manifest = _read_manifest(directory)
        if any(manifest.get(key) != value for key, value in self._identity.items()):
            # Missing, half-written, of another layout or of another database: start empty; the store
            # fills it from its tables.
            shutil.rmtree(directory, ignore_errors=True)
            manifest = {}
        directory.mkdir(parents=True, exist_ok=True)
        self._index = tantivy.Index(self._schema, path=str(directory), reuse=True)
        self._index.register_tokenizer(ANALYZER, self._analyzer)
        self._writer: tantivy.IndexWriter | None = self._new_writer()
        self._closed = False
        position = manifest.get("position")
        self.position: int | None = int(str(position)) if position is not None else None

    # --- keeping it in step ---------------------------------------------------------------------------------

    def put(self, rows: Iterable[ChunkRow]) -> None:
        """Add or replace chunks (searchable after `commit`)."""
        with self._writing() as writer:
            for chunk_id, document_id, title, text, doc_type, tags, created_at, updated_at in rows:
                writer.delete_documents_by_term("chunk", chunk_id)
                body = normal(" ".join([title] * self.title_repeats + [text]))
                try:
                    times = {"created": epoch_millis(created_at), "updated": epoch_millis(updated_at)}
                except ValueError:
                    # A time this engine cannot read (older engines wrote year 999 as "999-…", clock.py): the
                    # chunk goes in without its times, found by search and by no time bound, rather than stop
                    # the index (and with it every later job, and the engine's start) at this row for ever.
                    times = {}
                    logger.warning("document %d: its times %r, %r are not ISO-8601; its chunk %d is indexed "
                                   "without them, so no time bound finds it", document_id, created_at[:40],
                                   updated_at[:40], chunk_id)
                document = tantivy.Document(chunk=chunk_id, doc=document_id, body=body, doc_type=doc_type, **times)
                for tag in tags:
                    document.add_text("tag", tag)
                writer.add_document(document)

    def remove_chunks(self, chunk_ids: Iterable[int]) -> None:
        with self._writing() as writer:
            for chunk_id in chunk_ids:
                writer.delete_documents_by_term("chunk", chunk_id)

    def remove_documents(self, document_ids: Iterable[int]) -> None:
        with self._writing() as writer:
            for document_id in document_ids:
                writer.delete_documents_by_term("doc", document_id)

    def clear(self) -> None:
        with self._writing() as writer:
            writer.delete_all_documents()

    def commit(self, position: int) -> None:
        """Make the changes searchable and durable, then record that they reach `position` in the log."""
        with self._writing() as writer:
            writer.commit()
        self._index.reload()
        try:
            _write_manifest(self.directory, {**self._identity, "position": position})
        except OSError as exc:
            # The changes are committed and searchable: a manifest left at an earlier position (a full disk)
            # only makes the next start apply them again, so the write that made them has not failed.
            # `position` stays what the disk says, so the log is not pruned past it.
            logger.warning("recording the full-text index's position failed: %s; the changes it holds are "
                           "applied again at the next start", exc)
            return
        self.position = position

    def _new_writer(self) -> tantivy.IndexWriter:
        return self._index.writer(heap_size=_WRITER_HEAP, num_threads=1)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[tantivy.IndexWriter]:
        """The index's writer; one that fails is dropped with every change since the last commit, and the next
        change opens a new one. After an I/O error (a full disk, a file over RLIMIT_FSIZE) tantivy's writer is
        not to be used again: one killed refuses every later change, and one whose commit failed writing a
        file went on "committing" nothing, so the position recorded past changes the index never got (for
        good: it survived a restart). The caller has not moved its position past the changes dropped, so
        they are applied again (store/derived.py)."""
        if self._closed:
            raise RuntimeError("the full-text index is closed")
        if self._writer is None:
            self._writer = self._new_writer()
        writer = self._writer
        try:
            yield writer
        except Exception as exc:
            self._writer = None
            with contextlib.suppress(Exception):
                writer.wait_merging_threads()  # releases its lock on the directory for the next writer
            logger.error("writing the full-text index failed; its changes since its last commit are dropped "
                         "and applied again at the next write: %s", exc)
            raise IndexWriteFailed("the full-text index could not be written (a full disk, a directory it may "
                                   "not write: the engine log says why); the change is stored and is found by full-text search once the "
                                   "index can be written again") from exc

    def close(self) -> None:
        """Wait for background merges and release the index's write lock; the index is unusable after."""
        self._closed = True
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.wait_merging_threads()

    # --- searching -------------------------------------------------------------------------------------------

    def tokens(self, query: str) -> list[str]:
        """The query's words as the index holds them (stemmed), each once."""
        found: list[str] = []
        for word in query_words(normal(query)):
            for token in self._analyzer.analyze(word):
                if token not in found:
                    found.append(token)
        return found

    def search(self, query: str, where: DocumentFilter, limit: int, documents: Sequence[int] | None = None,
               filter_idf: bool = False, within: Mapping[str, float] | None = None) -> Ranking:
        """(chunk_id, BM25 score) best first, among chunks with the filter's tags and doc_type and, when
        `documents` is given, of those documents (the store resolves the other criteria to them).

        With `filter_idf`, a filtered search weighs each word by its IDF among the chunks the filter allows
        (`idf_weights`), not in the whole index; `within` gives those IDFs when they are already counted
        (`term_weights` with the same filter), so hybrid search counts them once."""
        tokens = self.tokens(query)
        if not tokens or limit <= 0 or (documents is not None and not documents):
            return []
        filters = self._filters(where, documents)
        searcher = self._index.searcher()
        boosts = self._boosts(searcher, tokens, filters, within) if filter_idf and filters else {}
        terms = []
        for token in tokens:
            term = tantivy.Query.term_query(self._schema, "body", token)
            terms.append((tantivy.Occur.Should, tantivy.Query.boost_query(term, boosts[token]) if token in boosts else term))
        query_ = tantivy.Query.boolean_query(terms)
        if filters:
            query_ = tantivy.Query.boolean_query(
                [(tantivy.Occur.Must, query_), *((tantivy.Occur.Must, tantivy.Query.const_score_query(f, 0.0))
                                                  for f in filters)]
            )
        hits = searcher.search(query_, limit, count=False).hits
        if not hits:
            return []
        ids = searcher.fast_field_values("chunk", [address for _, address in hits])
        found = [(int(chunk_id or 0), float(score)) for (score, _), chunk_id in zip(hits, ids, strict=True)]
        # Equal scores by chunk id, as fusion orders them: tantivy's order (by where each chunk sits in the
        # index's segments) differed between the stores, whose indexes are written in different batches.
        return sorted(found, key=lambda hit: (-hit[1], hit[0]))

    def passages(self, query: str, texts: Sequence[str], max_chars: int) -> list[Passage | None]:
        """For each text, the stretch of at most about `max_chars` characters whose words weigh most for this
        query, by tantivy's snippet generator (a matched word weighs its IDF in this index), with the words it
        matched; None for a text that holds none of the query's words (as this analyzer stems them)."""
        tokens = self.tokens(query)
        if not tokens or not texts:
            return [None] * len(texts)
        query_ = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(self._schema, "body", token)) for token in tokens]
        )
        generator = tantivy.SnippetGenerator.create(self._index.searcher(), query_, self._schema, "body")
        generator.set_max_num_chars(max_chars)
        found: list[Passage | None] = []
        for text in texts:
            folded = None if is_normal(text) else Folded.of(text)
            body = folded.folded if folded else text
            snippet = generator.snippet_from_doc(tantivy.Document(body=body))
            ranges = snippet.highlighted()
            if not ranges:
                found.append(None)
                continue
            # tantivy counts in UTF-8 bytes, on token (so character) boundaries; clients count characters.
            encoded = body.encode()
            where = snippet.fragment_range()
            fragment = encoded[where.start:where.end]

            def chars(offset: int, fragment: bytes = fragment) -> int:
                return len(fragment[:offset].decode())

            passage = Passage(text=fragment.decode(), start=len(encoded[:where.start].decode()),
                              highlights=tuple((chars(r.start), chars(r.end)) for r in ranges))
            found.append(folded.passage_in_text(passage) if folded else passage)
        return found

    def score_ceiling(self, query: str, where: DocumentFilter | None = None, documents: Sequence[int] | None = None,
                      filter_idf: bool = False) -> float:
        """The highest BM25 score a chunk could reach for this query, (k1 + 1) times the sum of its terms'
        IDF as tantivy computes it, ln(1 + (N - n + 0.5) / (n + 0.5)) for N chunks of which n hold the term
        (hybrid fusion's absolute scale, search/fusion.py); with `filter_idf` and a filter, N and n count
        only the chunks the filter allows, as `search` then weighs the words."""
        return ceiling_of(self.term_weights(query, where, documents, filter_idf))

    def term_weights(self, query: str, where: DocumentFilter | None = None, documents: Sequence[int] | None = None,
                     filter_idf: bool = False) -> list[tuple[str, float]]:
        """The query's words as the index holds them, in query order, each once, with the IDF `search` weighs
        them by (within the filter with `filter_idf`)."""
        tokens = self.tokens(query)
        if not tokens:
            return []
        searcher = self._index.searcher()
        filters = self._filters(where, documents) if filter_idf and where is not None else []
        weights = self.idf_weights(searcher, tokens, filters)
        return [(token, weights[token]) for token in tokens]

    def analyze(self, text: str) -> list[str]:
        """The words of `text` as the index holds them, in order (positions for search/term_evidence.py)."""
        return list(self._analyzer.analyze(normal(text)))

    def idf_weights(self, searcher: tantivy.Searcher, tokens: Sequence[str],
                    filters: Sequence[tantivy.Query] = ()) -> dict[str, float]:
        """Each token's IDF, over the whole index or, given filters, over the chunks they allow.

        Why within the filter: a search restricted to one collection or one conversation ranks only its
        chunks, and a word that is rare in the whole index may be in every other chunk of that collection
        (a person's name in their own notes): it tells nothing apart there, yet scored as rare it would
        outweigh the words that do (docs/benchmarks.md, "Memory retrieval": filter IDF)."""
        if not filters:
            total = searcher.num_docs
            return {token: _idf(total, searcher.doc_freq("body", token)) for token in tokens}
        allowed = [(tantivy.Occur.Must, f) for f in filters]
        total = _count(searcher, tantivy.Query.boolean_query(allowed))
        weights = {}
        for token in tokens:
            term = tantivy.Query.term_query(self._schema, "body", token)
            held = _count(searcher, tantivy.Query.boolean_query([(tantivy.Occur.Must, term), *allowed]))
            weights[token] = _idf(total, held)
        return weights

    def _boosts(self, searcher: tantivy.Searcher, tokens: Sequence[str], filters: Sequence[tantivy.Query],
                within: Mapping[str, float] | None = None) -> dict[str, float]:
        """Per token, the factor that turns tantivy's IDF over the whole index into the IDF within `filters`
        (`within`, counted here unless given)."""
        if within is None or any(token not in within for token in tokens):
            within = self.idf_weights(searcher, tokens, filters)
        overall = self.idf_weights(searcher, tokens)
        return {token: within[token] / overall[token] for token in tokens if overall[token] > 0}

    def _filters(self, where: DocumentFilter | None, documents: Sequence[int] | None) -> list[tantivy.Query]:
        filters = [tantivy.Query.term_query(self._schema, "tag", tag) for tag in where.tags] if where else []
        if where is not None and where.doc_type is not None:
            filters.append(tantivy.Query.term_query(self._schema, "doc_type", where.doc_type))
        if where is not None:
            filters.extend(self._time_ranges(where))
        if documents is not None:
            filters.append(tantivy.Query.term_set_query(self._schema, "doc", list(documents)))
        return filters

    def _time_ranges(self, where: DocumentFilter) -> list[tantivy.Query]:
        """One range query per time column the filter bounds: `*_after` inclusive, `*_before` exclusive."""
        bounds: dict[str, dict[str, int]] = {}
        for column, operator, stamp in where.time_bounds():
            bounds.setdefault(column, {})[operator] = epoch_millis(stamp)
        return [
            tantivy.Query.range_query(self._schema, TIME_FIELDS[column], tantivy.FieldType.Integer,
                                      side.get(">="), side.get("<"), True, "<" not in side)
            for column, side in bounds.items()
        ]

    def __len__(self) -> int:
        return int(self._index.searcher().num_docs)


def ceiling_of(weights: Sequence[tuple[str, float]]) -> float:
    """The highest BM25 score a chunk could reach for words of these IDFs: a term's score tends to
    idf * (k1 + 1) as it repeats."""
    return (BM25_K1 + 1) * sum(weight for _, weight in weights)


def _count(searcher: tantivy.Searcher, query: tantivy.Query) -> int:
    """How many chunks match `query`."""
    result = searcher.search(query, 1, count=True)
    return int(result.count or 0)  # type: ignore[attr-defined]  # tantivy's stub leaves `count` out


def _idf(total: int, held: int) -> float:
    """BM25's IDF as tantivy computes it."""
    return math.log(1 + (total - held + 0.5) / (held + 0.5))


def _read_manifest(directory: Path) -> dict[str, object]:
    try:
        return dict(json.loads((directory / MANIFEST).read_text()))
    except (OSError, ValueError):
        return {}


def _write_manifest(directory: Path, data: dict[str, object]) -> None:
    tmp = directory / f".{MANIFEST}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, directory / MANIFEST)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
