"""What the exact-duplicate check adds to queueing a note, at 100k notes in one scope (issue 35 item 2).

Store level: 100k note keys are written straight into `note_keys` (the check reads nothing else), then
`Store.submit` queues notes sent with `unique_in` (the note_keys insert, and for a duplicate the lookup of
the holder's job) and, for comparison, the same notes without it; the latencies of each are reported.

    python bench/duplicate_check.py [--notes 100000] [--calls 300] [--store sqlite|postgresql|both]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from kb_bridge.local_engine.store.base import NoteKey, Submission, note_text_key

SCOPE = "collection:memory"


def _fill(store: Any, notes: int) -> None:
    rows = [(SCOPE, note_text_key(f"note number {i}"), None, None) for i in range(notes)]
    with store.db.write() as conn:
        if store.kind == "sqlite":
            conn.executemany("INSERT INTO note_keys (scope, text_key, job_id, document_id) VALUES (?, ?, ?, ?)", rows)
        else:
            with conn.cursor() as cursor:
                cursor.executemany("INSERT INTO note_keys (scope, text_key, job_id, document_id) "
                                   "VALUES (%s, %s, %s, %s)", rows)
    # A holder with a job, as every real key has: the duplicates below meet it.
    job, _ = store.submit(Submission("note", {"text": "held", "tags": [SCOPE]}), None, "2026-01-01T00:00:00Z")
    with store.db.write() as conn:
        mark = "?" if store.kind == "sqlite" else "%s"
        conn.execute(f"UPDATE note_keys SET job_id = {mark}", (job["id"],))


def _time(store: Any, texts: list[str], unique: bool) -> list[float]:
    times = []
    for text in texts:
        key = NoteKey(SCOPE, note_text_key(text)) if unique else None
        started = time.perf_counter()
        store.submit(Submission("note", {"text": text, "tags": [SCOPE]}, unique=key), None, "2026-01-01T00:00:00Z")
        times.append((time.perf_counter() - started) * 1000)
    return times


def _stats(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"p50_ms": round(statistics.median(ordered), 3), "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 3)}


def run(kind: str, notes: int, calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        server = None
        if kind == "sqlite":
            from kb_bridge.local_engine.store.sqlite import SqliteStore

            store: Any = SqliteStore(Path(tmp) / "kb.sqlite3")
        else:
            from kb_bridge.local_engine.store.postgres import PostgresStore
            from kb_bridge.testing.postgres import PostgresServer

            server = PostgresServer().start()
            (Path(tmp) / "uploads").mkdir()
            store = PostgresStore(server.new_database(), Path(tmp), Path(tmp) / "uploads")
        try:
            store.open()
            started = time.perf_counter()
            _fill(store, notes)
            filled = time.perf_counter() - started
            result = {
                "store": kind, "notes": notes, "fill_seconds": round(filled, 1),
                "without_check": _stats(_time(store, [f"plain {i}" for i in range(calls)], unique=False)),
                "new_note_checked": _stats(_time(store, [f"new {i}" for i in range(calls)], unique=True)),
                "duplicate_found": _stats(_time(store, [f"note number {i * 7}" for i in range(calls)], unique=True)),
            }
            store.close()
            return result
        finally:
            if server is not None:
                server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--store", choices=("sqlite", "postgresql", "both"), default="both")
    args = parser.parse_args()
    kinds = ("sqlite", "postgresql") if args.store == "both" else (args.store,)
    print(json.dumps([run(kind, args.notes, args.calls) for kind in kinds], indent=2))


if __name__ == "__main__":
    main()
