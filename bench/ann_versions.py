"""One saved HNSW graph searched by two installs of usearch, side by side. Not a test.

setup.cfg holds usearch below 2.25: from 2.25 on its distance kernels come from numkong (48 MB installed),
where 2.23's come from simsimd (2 MB). This measures what that costs a search: a graph is built and saved
once, with the engine's parameters (store/vector_index.py: cosine, float16, 32 links per node, build beam
128; searched at beam 512 for the top 100), then each usearch install restores the SAME file in a process of
its own and times `--queries` searches; the installs take turns for `--rounds` rounds, so that other load
hits all alike. An install is a directory made with `pip install --target DIR --no-deps usearch==X simsimd`
(or numkong), or `installed` for the one in this environment. Also reported: recall@10 against exact search,
which must not differ between installs (same graph, same algorithm).

The vectors are clustered (1,000 Gaussian centres, each vector a centre plus noise, normalised) rather than
uniform, so the graph has neighbourhoods as real embeddings do; the point is the kernels, not retrieval.

    pip install --target /tmp/us23 --no-deps usearch==2.23.0 'simsimd>=6.0.5,<7'
    pip install --target /tmp/us26 --no-deps usearch==2.26.6 numkong
    python bench/ann_versions.py --vectors 200000 --installs /tmp/us23 /tmp/us26
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from common import machine, progress, write_result

DIM = 384
# The engine's parameters (kb_bridge/local_engine/store/vector_index.py).
CONNECTIVITY = 32
EXPANSION_ADD = 128
EXPANSION_SEARCH = 512
CANDIDATES = 100

_BUILD = """
import sys, numpy as np
from usearch.index import Index
count, path = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
centres = rng.standard_normal((1000, {dim})).astype(np.float32)
vectors = centres[rng.integers(0, 1000, count)] + 0.6 * rng.standard_normal((count, {dim})).astype(np.float32)
vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
index = Index(ndim={dim}, metric="cos", dtype="f16", connectivity={connectivity}, expansion_add={expansion_add})
index.add(np.arange(count), vectors)
index.save(path)
np.save(path + ".vectors.npy", vectors)
"""

_SEARCH = """
import json, sys, time, numpy as np, usearch
from usearch.index import Index
path, queries = sys.argv[1], int(sys.argv[2])
index = Index.restore(path)
index.expansion_search = {expansion_search}
vectors = np.load(path + ".vectors.npy", mmap_mode="r")
rng = np.random.default_rng(1)
chosen = vectors[rng.integers(0, len(vectors), queries)]
probes = chosen + 0.3 * rng.standard_normal(chosen.shape).astype(np.float32)
probes /= np.linalg.norm(probes, axis=1, keepdims=True)
for probe in probes[:20]:
    index.search(probe, {candidates})
seconds, found = [], 0
for probe in probes:
    start = time.perf_counter()
    keys = index.search(probe, {candidates}).keys
    seconds.append(time.perf_counter() - start)
    exact = np.argpartition(-(vectors @ probe), 10)[:10]
    found += len(set(exact.tolist()) & set(keys[:10].tolist()))
print(json.dumps({{"version": usearch.__version__, "seconds": seconds, "recall_at_10": found / (10 * queries)}}))
"""


def run(install: str, code: str, *arguments: str) -> str:
    env = dict(os.environ)
    if install != "installed":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [install, env.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", code, *arguments], env=env, check=True, capture_output=True,
                          text=True).stdout


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vectors", type=int, default=200_000, help="vectors in the graph")
    parser.add_argument("--queries", type=int, default=1000, help="searches per install and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--installs", nargs="+", default=["installed"],
                        help="usearch installs: pip --target directories, or 'installed'")
    parser.add_argument("--build-with", default="installed", help="the install that builds the graph")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="ann-versions-") as workdir:
        path = str(Path(workdir) / "graph.usearch")
        progress(f"building a graph of {args.vectors} vectors with {args.build_with}")
        run(args.build_with, _BUILD.format(dim=DIM, connectivity=CONNECTIVITY, expansion_add=EXPANSION_ADD),
            str(args.vectors), path)
        samples: dict[str, list[float]] = {install: [] for install in args.installs}
        versions: dict[str, str] = {}
        recall: dict[str, float] = {}
        for round_number in range(args.rounds):
            for install in args.installs:
                result = json.loads(run(install, _SEARCH.format(expansion_search=EXPANSION_SEARCH,
                                                                candidates=CANDIDATES), path, str(args.queries)))
                samples[install].extend(result["seconds"])
                versions[install], recall[install] = result["version"], result["recall_at_10"]
                progress(f"round {round_number + 1}: usearch {result['version']} "
                         f"p50 {statistics.median(result['seconds']) * 1e3:.3f} ms")
    first = args.installs[0]
    rows = {}
    for install in args.installs:
        ordered = sorted(samples[install])
        rows[install] = {"usearch": versions[install], "p50_ms": statistics.median(ordered) * 1e3,
                         "p95_ms": ordered[int(0.95 * (len(ordered) - 1))] * 1e3,
                         "recall_at_10": recall[install]}
        rows[install]["p50_vs_first"] = rows[install]["p50_ms"] / rows[first]["p50_ms"] if rows[first]["p50_ms"] else 0
        print(f"usearch {versions[install]:8} ({install}): p50 {rows[install]['p50_ms']:.3f} ms, "
              f"p95 {rows[install]['p95_ms']:.3f} ms, × first {rows[install]['p50_vs_first']:.3f}, "
              f"recall@10 {recall[install]:.3f}")
    write_result("ann-versions", {"machine": machine(), "arguments": vars(args), "installs": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
