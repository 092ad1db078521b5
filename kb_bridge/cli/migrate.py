"""`kb-bridge migrate --from-sqlite DIR --to postgresql://...`: copy a local engine's SQLite store into
PostgreSQL, with the same document ids, versions, tags, chunks and vectors (nothing is re-embedded).

Resumable and idempotent: documents are copied in batches, each in one transaction, and a document whose
id is already in the target is skipped, so running the command again after an interruption (or twice)
copies only what is missing. At the end the counts of both stores are compared: exit 0 when they match,
1 when they do not (or the target was unreachable), 2 for a usage error, 130 on Ctrl-C. Stop the engine
that writes to the SQLite store first, or documents it adds meanwhile may be missed (a rerun copies them).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

BATCH = 200


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from-sqlite", required=True, metavar="DIR", type=Path,
                        help="the engine's data directory (the one holding engine.sqlite3)")
    parser.add_argument("--to", required=True, metavar="URL",
                        help="the PostgreSQL database (postgresql://user:password@host/db), as KB_ENGINE_DATABASE_URL")
    parser.add_argument("--json", action="store_true", help="print the final counts as JSON")


def run_migrate(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    from kb_bridge.cli.ingest import Progress
    from kb_bridge.local_engine.errors import EngineError
    from kb_bridge.local_engine.store.postgres import importing, prepare_database
    from kb_bridge.local_engine.store.postgres.db import Database, redacted
    from kb_bridge.local_engine.store.sqlite import export

    source_path = args.from_sqlite / "engine.sqlite3"
    if not source_path.is_file():
        print(f"kb-bridge migrate: --from-sqlite: no engine.sqlite3 in {args.from_sqlite}", file=err)
        return 2
    if not args.to.startswith(("postgresql://", "postgres://")):
        print("kb-bridge migrate: --to must be a postgresql:// URL", file=err)
        return 2
    source = export.open_readonly(source_path)
    expected = export.totals(source)
    identity = export.embedding_identity(source)
    dim = int(identity.split("/")[1]) if identity and identity.count("/") >= 2 else None
    with_vectors = dim is not None and expected["vectors"] > 0
    progress = Progress(err, 0, 0, bar=err.isatty())
    try:
        prepare_database(args.to)
        target = Database(args.to)
        with target.connection() as conn:
            importing.prepare(conn, identity if with_vectors else None, dim)
        progress.phase("copying", expected["documents"], "documents")
        if expected["vectors"] > 100_000:
            print("the vector index is built once everything is copied: a few minutes per million vectors",
                  file=err)
        copied = 0
        for batch in export.all_documents(source, BATCH):
            with target.write() as conn:
                todo = importing.missing(conn, [d.id for d in batch])
                importing.write(conn, [d for d in batch if d.id in todo], with_vectors)
            copied += len(todo)
            progress.advance(len(batch), f"{copied} copied")
        with target.write() as conn:
            importing.finish(conn)
        print("vacuuming and analysing the copied tables, so the first searches run at full speed", file=err)
        with target.connection() as conn:
            importing.settle(conn)
            found = importing.totals(conn, with_vectors)
        target.close()
    except KeyboardInterrupt:
        progress.close()
        print("kb-bridge migrate: interrupted; run it again to continue", file=err)
        return 130
    except EngineError as exc:
        progress.close()
        print(f"kb-bridge migrate: {exc.message}", file=err)
        return 1
    progress.close()
    if not with_vectors:
        expected["vectors"] = 0
    matches = all(found[key] >= expected[key] for key in expected)
    report = {"source": str(source_path), "target": redacted(args.to), "copied": copied, "expected": expected,
              "found": found, "ok": matches}
    if args.json:
        print(json.dumps(report), file=out)
    else:
        print(f"copied {copied} document(s) to {redacted(args.to)}", file=out)
        for key in ("documents", "chunks", "vectors", "tags"):
            mark = "ok" if found[key] >= expected[key] else "MISSING"
            print(f"  {key:<9} sqlite {expected[key]:>9}  postgresql {found[key]:>9}  {mark}", file=out)
    return 0 if matches else 1
