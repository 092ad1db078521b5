"""Where a search's time goes: each store lookup and step of `Searcher.search`, timed in process. Not a test.

It opens an engine on a data directory that already holds a corpus (a store kept by `bench/retrieval.py
--keep` or `bench/memory.py --keep`; the engine must be stopped, it takes the directory's lock), loads the
bundled model, and sends each SciFact claim with judgements (or the first --queries of them) as a search
through `Searcher.search`, after 20 warm-up queries. The store's methods that a search calls, the snippet
step and the wait for the query vector (the model embeds it on its own thread while BM25 runs) are wrapped
with timers; the table gives each one's p50 / p95 per search beside the whole search's. HTTP and JSON are
not included: `bench/retrieval.py` measures the round trip.

With --locomo it sends LoCoMo's questions instead, each restricted to its conversation's tag as
`bench/memory.py` asks them, to a data directory that holds the turns (`bench/memory.py --keep`).

    python bench/search_stages.py --data /tmp/scifact                       # top_n 100, hybrid
    python bench/search_stages.py --data /tmp/scifact --top-n 10 --mode vector
    python bench/search_stages.py --data /tmp/memory-1m --locomo --top-n 10  # memory's questions
    python bench/search_stages.py --data DIR --locomo --top-n 10 --set KB_ENGINE_DATABASE_URL=URL   # on PostgreSQL
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, cast

from common import SCIFACT, engine_env, load_beir, percentile, progress, write_result
from memory import DEFAULT_LOCOMO
from memory import load as load_locomo
from retrieval import load_qrels

# The Store methods a search calls (store/base.py); a method a mode does not call is left out of the table.
STORE_STEPS = ("query_terms", "search_text", "text_tokens", "search_vectors", "collection_notes", "similarities",
               "adjacent_notes", "get_chunks", "passages")
WARM_UP = 20


def timed(function: Callable[..., Any], spent: dict[str, float], name: str) -> Callable[..., Any]:
    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + (time.perf_counter() - started) * 1000

    return run


class TimedFuture:
    """The query vector's future, timing the wait in `result()`."""

    def __init__(self, future: Any, spent: dict[str, float]) -> None:
        self._future, self._spent = future, spent

    def result(self, timeout: float | None = None) -> Any:
        return timed(self._future.result, self._spent, "wait for the query vector")(timeout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="engine data directory holding a corpus")
    parser.add_argument("--corpus", type=Path, default=SCIFACT, help="BEIR directory of the claims")
    parser.add_argument("--queries", type=int, help="only the first N claims")
    parser.add_argument("--top-n", type=int, default=100, help="results per search (default: %(default)s)")
    parser.add_argument("--mode", choices=("hybrid", "fts", "vector"), default="hybrid")
    parser.add_argument("--locomo", type=Path, nargs="?", const=DEFAULT_LOCOMO,
                        help="ask LoCoMo's questions, each within its conversation (default folder: %(const)s)")
    parser.add_argument("--set", action="append", default=[], metavar="VAR=VALUE",
                        help="engine environment variable, e.g. KB_ENGINE_DATABASE_URL=postgresql://... for a "
                             "store on PostgreSQL (repeatable)")
    args = parser.parse_args(argv)

    from kb_bridge.local_engine.config import load_config
    from kb_bridge.local_engine.engine import Engine
    from kb_bridge.local_engine.search.searcher import SearchRequest
    from kb_bridge.local_engine.store.base import DocumentFilter

    if args.locomo is not None:
        _, questions = load_locomo(args.locomo, None)
        searches = [SearchRequest(q.text, args.top_n, DocumentFilter(tags=(f"locomo:{q.conversation}",)), args.mode)
                    for q in questions][: args.queries]
    else:
        _, queries = load_beir(args.corpus)
        judged = load_qrels(args.corpus / "qrels" / "train.tsv")  # the claims bench/retrieval.py asks
        searches = [SearchRequest(text, args.top_n, mode=args.mode)
                    for query_id, text in queries.items() if query_id in judged][: args.queries]
    engine = Engine(load_config({"KB_ENGINE_DATA": str(args.data), **engine_env(args.set)}))
    engine.start()
    spent: dict[str, float] = {}
    per_search: dict[str, list[float]] = {}
    try:
        for name in STORE_STEPS:
            setattr(engine.store, name, timed(getattr(engine.store, name), spent, name))
        embedder = engine.embedders.current()
        if embedder is not None:
            submit = embedder.submit_query
            embedder.submit_query = (  # type: ignore[method-assign]
                lambda text: cast("Future[Any]", TimedFuture(submit(text), spent)))
        progress(f"{len(searches)} searches, {args.mode}, top_n {args.top_n}")
        for n, search in enumerate(searches[:WARM_UP] + searches):
            spent.clear()
            started = time.perf_counter()
            engine.searcher.search(search)
            if n >= WARM_UP:
                per_search.setdefault("whole search", []).append((time.perf_counter() - started) * 1000)
                for name, ms in spent.items():
                    per_search.setdefault(name, []).append(ms)
    finally:
        engine.close()
    rows = {name: {"searches": len(values), "p50": round(percentile(values, 0.5), 3),
                   "p95": round(percentile(values, 0.95), 3)} for name, values in per_search.items()}
    print(f"{'step':28} {'p50 ms':>8} {'p95 ms':>8}  searches")
    for name, row in rows.items():
        print(f"{name:28} {row['p50']:8.2f} {row['p95']:8.2f}  {row['searches']}")
    path = write_result("search-stages", {"data": str(args.data), "mode": args.mode, "top_n": args.top_n,
                                          "questions": "locomo" if args.locomo is not None else "scifact",
                                          "steps": rows})
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
