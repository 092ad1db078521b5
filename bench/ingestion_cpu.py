"""Where the CPU goes while the local engine ingests: seconds of CPU per engine thread, and the client's. Not a test.

bench/ingestion.py gives the engine's rate against the raw model; this says what the rest of the machine's time
was spent on. A fresh engine (default settings, `--wait-for-model`) takes the same bulk upload as in
bench/ingestion.py, and the CPU time of every thread of its gunicorn worker is read from /proc before the
first upload, after the last upload, and once the queue is drained; threads are named by `py-spy dump`
(Python 3.11 does not name OS threads). Threads py-spy does not know are native: torch's OpenMP workers
(named after the process) or tantivy's (named by tantivy).

    python bench/ingestion_cpu.py --documents 1000
    python bench/ingestion_cpu.py --documents 1000 --set KB_ENGINE_DOCUMENT_PRECISION=float32
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import requests

from common import SCIFACT, progress, worker_pids, write_result
from ingestion import corpus_files, embedding_inputs, start_engine, upload_all, wait_drained

# Thread names (py-spy's, or the OS's for native threads) to the part of the engine they belong to.
GROUPS = (
    ("kb-engine-ingest", "model (embed thread)"),
    ("native:python", "model (torch OpenMP workers)"),
    ("ThreadPoolExecutor", "HTTP request threads"),
    ("MainThread", "gunicorn worker main thread"),
    ("kb-engine-prepare", "prepare (notes: chunk)"),
    ("kb-engine-files", "files (read in the reader process, chunk)"),
    ("kb-engine-store", "store (transactions)"),
    ("native:", "tantivy and other native threads"),
    ("", "other Python threads"),
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=SCIFACT, help="BEIR directory (default: %(default)s)")
    parser.add_argument("--documents", type=int, default=1000, help="abstracts to ingest (default 1000)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="engine environment")
    return parser.parse_args(argv)


class ThreadClock:
    """CPU seconds per thread of one process, grouped by thread name."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK")
        # py-spy installs its binary beside the interpreter: found there also when the venv is not activated.
        spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
        if spy is None:
            raise SystemExit("py-spy is needed to name the engine's threads: pip install py-spy")
        self.spy = spy
        self.names: dict[int, str] = {}

    def read(self) -> collections.Counter[str]:
        # Named anew each time: gunicorn starts its request threads as requests come.
        dump = subprocess.run([self.spy, "dump", "--pid", str(self.pid), "--json"], capture_output=True, text=True,
                              check=True)
        self.names.update({int(t["os_thread_id"]): t["thread_name"] or "" for t in json.loads(dump.stdout)})
        seconds: collections.Counter[str] = collections.Counter()
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            try:
                comm = Path(f"/proc/{self.pid}/task/{tid}/comm").read_text().strip()
                fields = Path(f"/proc/{self.pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            except FileNotFoundError:  # a thread that ended
                continue
            name = self.names.get(int(tid), f"native:{comm}")
            seconds[group_of(name)] += (int(fields[11]) + int(fields[12])) / self.tick  # utime + stime
        return seconds


def group_of(name: str) -> str:
    return next(label for prefix, label in GROUPS if name.startswith(prefix))


def client_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    env = {"KB_ENGINE_EMBEDDER": "minilm", **dict(item.split("=", 1) for item in args.set)}
    documents = corpus_files(args.corpus, args.documents)
    chunks = len(embedding_inputs(documents))
    progress(f"{len(documents)} documents, {chunks} chunks")
    workdir = Path(tempfile.mkdtemp(prefix="ingestion-cpu-"))
    engine = start_engine(workdir, Path(tempfile.mkdtemp(prefix="data-", dir=workdir)), env)
    try:
        clock = ThreadClock(worker_pids(engine)[0])
        http = requests.Session()
        marks = [(clock.read(), client_seconds(), time.perf_counter())]
        upload_all(http, engine.url, documents)
        marks.append((clock.read(), client_seconds(), time.perf_counter()))
        status = wait_drained(http, engine.url, chunks)
        marks.append((clock.read(), client_seconds(), time.perf_counter()))
    finally:
        engine.stop()
    phases = {}
    for phase, (start, end) in (("upload", (0, 1)), ("drain", (1, 2)), ("whole", (0, 2))):
        (cpu0, client0, t0), (cpu1, client1, t1) = marks[start], marks[end]
        threads = {label: round(cpu1[label] - cpu0[label], 2) for _, label in GROUPS}
        phases[phase] = {"wall_s": round(t1 - t0, 2), "cores": os.cpu_count(), "engine_threads_s": threads,
                         "engine_s": round(sum(threads.values()), 2), "client_s": round(client1 - client0, 2)}
    whole = phases["whole"]
    per_document = {label: round(1000 * seconds / len(documents), 2)
                    for label, seconds in whole["engine_threads_s"].items()}
    per_document["benchmark client"] = round(1000 * whole["client_s"] / len(documents), 2)
    result = {"documents": len(documents), "chunks": status["chunks"],
              "chunks_per_s": round(status["chunks"] / whole["wall_s"], 2), "phases": phases,
              "cpu_ms_per_document": per_document,
              "model": status.get("model"), "settings": env}
    print(json.dumps(result, indent=2))
    progress(f"results: {write_result('ingestion-cpu', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
