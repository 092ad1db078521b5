"""Full-text search with a time bound: the text index's own time columns against document ids from SQL.
Not a test.

A search bounded by created_at or updated_at once asked the database which documents the bound allows and
handed tantivy that list as a set of terms, for every count of a word's IDF within the filter and again for
the ranking: the list grows with the store, so a bound that lets most of 100k chunks through cost hundreds of
milliseconds. Now the index holds each chunk's document times in fast fields and a bound is a range over
them (store/text_index.py, TIME_FIELDS). Both ways run here side by side, in turns, in one process, on one
store: the store's `query_terms` and `search_text` as the hybrid searcher calls them (IDF within the filter),
against the same two calls of the index given the ids the database resolves for the bound and no time bound
itself (what the engine did before). Both must rank the same chunks; the benchmark checks that they do.

Queries are SciFact's claims. `--data` is an engine data directory, e.g. a tier that bench/search_scale.py
kept (`--data-root /tmp/scale --keep`); opening it with this checkout rebuilds its text index once when the
index's layout changed.

    python bench/time_bounds.py --data /tmp/scale/tier-100000
    python bench/time_bounds.py --data /tmp/scale/tier-1000000 --queries 50
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import SCIFACT, load_beir, progress, summary_ms, write_result
from kb_bridge.local_engine.config import load_config
from kb_bridge.local_engine.store.backends import open_store
from kb_bridge.local_engine.store.base import DocumentFilter, Ranking
from kb_bridge.local_engine.store.sqlite import SqliteStore

DEPTH = 100  # the candidates the hybrid searcher asks BM25 for


def bounds(database: Path) -> dict[str, tuple[DocumentFilter, int]]:
    """Bounds on created_at, each with how many documents pass it: all of them, from the created_at of the
    newest tenth on (more pass when many documents share that time), none."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as conn:
        count = conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0]
        tenth = str(conn.execute("SELECT created_at FROM documents ORDER BY created_at DESC, id DESC LIMIT 1 "
                                 "OFFSET ?", (max(count // 10 - 1, 0),)).fetchone()[0])
        newer = conn.execute("SELECT COUNT(*) FROM documents WHERE created_at >= ?", (tenth,)).fetchone()[0]
    return {
        "created_after 1970": (DocumentFilter(created_after="1970-01-01T00:00:00.000Z"), count),
        f"created_after {tenth}": (DocumentFilter(created_after=tenth), newer),
        "created_before 1970": (DocumentFilter(created_before="1970-01-01T00:00:00.000Z"), 0),
    }


def index_ranges(store: SqliteStore) -> Callable[[str, DocumentFilter], Ranking]:
    """Now: the store's two calls, the bound applied by the index."""
    def run(query: str, where: DocumentFilter) -> Ranking:
        terms = store.query_terms(query, where, True)
        return store.search_text(query, where, DEPTH, True, terms)
    return run


def ids_from_sql(store: SqliteStore) -> Callable[[str, DocumentFilter], Ranking]:
    """Before: the documents resolved by SQL twice (IDF, then ranking), handed to the index as ids."""
    text = store.indexes.text
    assert text is not None
    untimed = {"created_after": None, "created_before": None, "updated_after": None, "updated_before": None}

    def allowed(where: DocumentFilter) -> list[int]:
        with store.db.snapshot() as conn:
            return list(store.sql_documents.matching_document_ids(conn, where))

    def run(query: str, where: DocumentFilter) -> Ranking:
        plain = dataclasses.replace(where, **untimed)
        weights = text.term_weights(query, plain, allowed(where), True)
        return text.search(query, plain, DEPTH, allowed(where), True, dict(weights))
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="engine data directory (SQLite)")
    parser.add_argument("--queries", type=int, default=100, help="SciFact claims per bound (default 100)")
    parser.add_argument("--corpus", type=Path, default=SCIFACT, help="BEIR directory of the claims")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    _, claims = load_beir(args.corpus)
    queries = list(claims.values())[: args.queries]
    config = load_config({"KB_ENGINE_DATA": str(args.data)})
    started = time.monotonic()
    store = open_store(config)
    store.open()  # a text index of an older layout is rebuilt here
    assert isinstance(store, SqliteStore), "a SQLite data directory"
    progress(f"store open in {time.monotonic() - started:.1f} s")
    ways = {"index ranges (now)": index_ranges(store), "ids from SQL (before)": ids_from_sql(store)}
    figures: dict[str, Any] = {}
    for label, (where, passing) in bounds(config.database_path).items():
        timings: dict[str, list[float]] = {way: [] for way in ways}
        for query in queries:
            rankings = []
            for way, run in ways.items():  # in turns, so load on the machine falls on both alike
                t = time.perf_counter()
                rankings.append(run(query, where))
                timings[way].append(time.perf_counter() - t)
            if [c for c, _ in rankings[0]] != [c for c, _ in rankings[1]]:
                raise SystemExit(f"the two ways rank differently for {query!r} with {label}")
        row: dict[str, Any] = {"documents passing": passing, **{way: summary_ms(v) for way, v in timings.items()}}
        before, now = row["ids from SQL (before)"]["p50"], row["index ranges (now)"]["p50"]
        row["p50 ratio before / now"] = round(before / now, 1) if now else None
        figures[label] = row
        progress(f"{label}: now p50 {now} ms, before p50 {before} ms")
    store.close()
    path = write_result("time-bounds", {"data": str(args.data), "queries": len(queries), "figures": figures})
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(f"{'bound':38s} {'passing':>9s} {'now p50':>9s} {'now p95':>9s} {'before p50':>11s} "
              f"{'before p95':>11s} {'ratio':>6s}")
        for label, row in figures.items():
            now_, before_ = row["index ranges (now)"], row["ids from SQL (before)"]
            print(f"{label:38s} {row['documents passing']:9d} {now_['p50']:9.2f} {now_['p95']:9.2f} "
                  f"{before_['p50']:11.2f} {before_['p95']:11.2f} {row['p50 ratio before / now']!s:>6s}")
        print(f"(written to {path})")


if __name__ == "__main__":
    main()
