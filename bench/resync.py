"""A no-op rerun of `kb-bridge ingest` over many unchanged files (issue 37 item 5; target: 10,000 files in 5 s
or less on 2 cores): makes N small files, ingests them once, then times the rerun that finds nothing to do,
with its state file, and once more without it (rebuilt from the engine: every file read).

    python bench/resync.py [--files 10000]

Starts and stops its own local engine with KB_ENGINE_EMBEDDER=none (full text only: the first load then
takes minutes instead of the model's hour; the rerun's time does not depend on the embedder, since it
neither uploads nor embeds). The CLI runs as a user runs it, a process of its own.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import progress, write_result
from kb_bridge.testing.processes import REPO, clean_env, start_engine


def make_files(folder: Path, count: int) -> None:
    for index in range(count):
        sub = folder / f"part{index // 500:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"note{index:05d}.md").write_text(f"# Note {index}\n\nField note {index} about the shore birds.\n")


def ingest(url: str, folder: Path, state: Path) -> tuple[float, dict[str, Any]]:
    env = clean_env({"KB_ENGINE_URL": url})
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "kb_bridge", "ingest", str(folder), "--collection", "resync",
                             "--state", str(state), "--json"], env=env, cwd=REPO, capture_output=True, text=True)
    took = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"ingest failed ({result.returncode}): {result.stderr[-2000:]}")
    return took, json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kb-resync-") as name:
        tmp = Path(name)
        folder, state = tmp / "notes", tmp / "state.json"
        make_files(folder, args.files)
        engine = start_engine(tmp, tmp / "data", env={"KB_ENGINE_EMBEDDER": "none"})
        try:
            first, report = ingest(engine.url, folder, state)
            progress(f"first load: {first:.1f} s, added {report['added']}")
            rerun, report = ingest(engine.url, folder, state)
            assert report["skipped"] == args.files, report
            progress(f"no-op rerun with the state file: {rerun:.2f} s")
            state.unlink()
            rebuilt, report = ingest(engine.url, folder, state)
            assert report["skipped"] == args.files, report
            progress(f"no-op rerun without it (rebuilt from the engine): {rebuilt:.2f} s")
            again, _ = ingest(engine.url, folder, state)
            progress(f"no-op rerun with the rebuilt state file: {again:.2f} s")
        finally:
            engine.stop()
    result = {"files": args.files, "first_load_s": round(first, 2), "noop_rerun_s": round(rerun, 2),
              "noop_rerun_without_state_s": round(rebuilt, 2), "noop_rerun_after_rebuild_s": round(again, 2)}
    print(json.dumps(result, indent=2))
    write_result("resync", result)


if __name__ == "__main__":
    main()
