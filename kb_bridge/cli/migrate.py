"""`kb-bridge migrate --from-sqlite DIR --to postgresql://...`: copy a local engine's SQLite store into
PostgreSQL, with the same document ids, versions, tags, chunks and vectors (nothing is re-embedded).

Resumable and idempotent: documents are copied in batches, each in one transaction, and a document whose
id is already in the target is skipped, so running the command again after an interruption (or twice)
copies only what is missing. At the end the counts of both stores are compared.

The source is not trusted (store/sqlite/export.py): it is checked whole before anything is written to
PostgreSQL, and a file that is not a sound engine store is one line naming it. One document that PostgreSQL
cannot hold (a NUL character an older engine took) never stops the copy: it is named by id with the reason,
skipped, and the rest is copied; the exit status is then 1, so a script notices.

Exit status: 0 when everything arrived; 1 when documents were skipped, the counts do not match, or the target
failed; 2 for a usage error (a bad --to URL, a --from-sqlite that is not a sound store); 130 on Ctrl-C. Stop
the engine that writes to the SQLite store first, or documents it adds meanwhile may be missed (a rerun
copies them).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from kb_bridge.local_engine.store.base import StoredDocument
    from kb_bridge.local_engine.store.postgres.db import Database

BATCH = 200
PROG = "kb-bridge migrate"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from-sqlite", required=True, metavar="DIR", type=Path,
                        help="the engine's data directory (the one holding engine.sqlite3)")
    parser.add_argument("--to", required=True, metavar="URL",
                        help="the PostgreSQL database (postgresql://user:password@host/db, with @ / : %% and spaces in "
                             "the password percent-encoded), as KB_ENGINE_DATABASE_URL")
    parser.add_argument("--json", action="store_true", help="print the final counts as JSON")


def run_migrate(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    try:
        import psycopg
    except ImportError:
        print(f"{PROG}: needs the PostgreSQL driver: pip install 'kb-bridge[postgres]'", file=err)
        return 2
    from kb_bridge.cli.ingest import Progress
    from kb_bridge.local_engine import database_url
    from kb_bridge.local_engine.errors import ConfigError, EngineError
    from kb_bridge.local_engine.store.postgres import importing, prepare_database
    from kb_bridge.local_engine.store.postgres.db import Database
    from kb_bridge.local_engine.store.sqlite import export

    source_path = args.from_sqlite / "engine.sqlite3"
    if not source_path.is_file():
        print(f"{PROG}: --from-sqlite: no engine.sqlite3 in {args.from_sqlite}", file=err)
        return 2
    try:
        database_url.check(args.to, "--to")
    except ConfigError as exc:
        print(f"{PROG}: {exc.message}", file=err)
        return 2
    try:  # the whole source is checked before PostgreSQL is touched
        source = export.open_readonly(source_path)
        export.check(source)
        expected = export.totals(source)
        embedding = export.embedding(source)
    except (ConfigError, sqlite3.Error) as exc:
        print(f"{PROG}: --from-sqlite: {source_path}: {_reason(exc)}", file=err)
        return 2
    identity, dim = embedding if embedding is not None else (None, None)
    with_vectors = dim is not None and expected["vectors"] > 0
    progress = Progress(err, 0, 0, bar=err.isatty())
    skipped: list[dict[str, object]] = []

    lead = "\n" if err.isatty() else ""  # below the bar, not on its line

    def skip(document_id: object, reason: str) -> None:
        # An id is an integer in a store the engine wrote; a hand-made file may hold anything there.
        shown = document_id if isinstance(document_id, int) else repr(document_id)[:40]
        skipped.append({"id": shown, "reason": reason})
        print(f"{lead}{PROG}: document {shown} skipped: {reason}", file=err)

    copied = 0
    try:
        prepare_database(args.to)
        target = Database(args.to)
        with target.connection() as conn:
            importing.prepare(conn, identity if with_vectors else None, dim)
        progress.phase("copying", expected["documents"], "documents")
        if expected["vectors"] > 100_000:
            print("the vector index is built once everything is copied: a few minutes per million vectors",
                  file=err)
        for batch in export.all_documents(source, BATCH):
            documents: list[StoredDocument] = []
            for item in batch:
                reason = item.reason if isinstance(item, export.Unreadable) else importing.refusal(item)
                if reason is None and not isinstance(item, export.Unreadable):
                    documents.append(item)
                else:
                    skip(item.id, reason or "")
            copied += _copy(target, documents, with_vectors, skip)
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
        print(f"{PROG}: interrupted; run it again to continue", file=err)
        return 130
    except EngineError as exc:
        progress.close()
        print(f"{PROG}: {exc.message}", file=err)
        return 1
    except sqlite3.Error as exc:  # the source failed while being read; what was copied stays (a rerun resumes)
        progress.close()
        print(f"{PROG}: --from-sqlite: {source_path}: cannot be read: {_reason(exc)}", file=err)
        return 1
    except psycopg.Error as exc:  # the target refused a step other than one document (its schema, the index)
        progress.close()
        print(f"{PROG}: PostgreSQL refused the migration: {_reason(exc)}", file=err)
        return 1
    progress.close()
    if not with_vectors:
        expected["vectors"] = 0
    matches = all(found[key] >= expected[key] for key in expected)
    ok = matches and not skipped
    target_url = database_url.redacted(args.to)
    report = {"source": str(source_path), "target": target_url, "copied": copied, "skipped": skipped,
              "expected": expected, "found": found, "ok": ok}
    if args.json:
        print(json.dumps(report), file=out)
    else:
        print(f"copied {copied} document(s) to {target_url}"
              + (f"; skipped {len(skipped)} (named above): {', '.join(str(s['id']) for s in skipped)}" if skipped else ""),
              file=out)
        for key in ("documents", "chunks", "vectors", "tags"):
            mark = "ok" if found[key] >= expected[key] else "MISSING"
            print(f"  {key:<9} sqlite {expected[key]:>9}  postgresql {found[key]:>9}  {mark}", file=out)
    return 0 if ok else 1


def _copy(target: Database, documents: Sequence[StoredDocument], with_vectors: bool,
          skip: Callable[[object, str], None]) -> int:
    """Copy the documents not yet in the target, in one transaction; if PostgreSQL refuses that, one
    transaction per document, so that only the documents it refuses are skipped (and reported)."""
    import psycopg

    from kb_bridge.local_engine.store.postgres import importing

    # A value PostgreSQL cannot take (psycopg.Error: DataError, IntegrityError...), or a vector of the wrong
    # size (ValueError). The target going away is StoreUnavailable, which stops the migration.
    refused = (psycopg.Error, ValueError, TypeError)
    try:
        with target.write() as conn:
            todo = importing.missing(conn, [d.id for d in documents])
            importing.write(conn, [d for d in documents if d.id in todo], with_vectors)
        return len(todo)
    except refused:
        pass
    copied = 0
    for document in documents:
        try:
            with target.write() as conn:
                if importing.missing(conn, [document.id]):
                    importing.write(conn, [document], with_vectors)
                    copied += 1
        except refused as exc:
            skip(document.id, importing.refused_because(exc))
    return copied


def _reason(exc: BaseException) -> str:
    message = getattr(exc, "message", None) or str(exc).strip() or type(exc).__name__
    return str(message).splitlines()[0][:300]
