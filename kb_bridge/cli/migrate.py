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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb_bridge.cli.exits import FAILED, OK, USAGE, Failed, add_command, hint
from kb_bridge.cli.progress import Progress

if TYPE_CHECKING:
    from kb_bridge.local_engine.store.base import StoredDocument
    from kb_bridge.local_engine.store.postgres.db import Database

BATCH = 200
PROG = "kb-bridge migrate"
Skip = Callable[[object, str], None]


def add_arguments(commands: Any) -> None:
    parser = add_command(
        commands, "migrate", run_migrate,
        help="copy a local engine's SQLite store into PostgreSQL (ids, versions, vectors kept)",
        description="Copy documents, chunks, vectors (no re-embedding), tags and versions from a local engine's "
                    "SQLite data directory into a PostgreSQL database for KB_ENGINE_DATABASE_URL. Resumable and "
                    "idempotent: a rerun copies only what is missing. Counts are compared at the end.",
        epilog="Exit status: 0 copied and the counts match; 1 a document was skipped (named on stderr), counts "
               "differ or the database failed; 2 usage error (a bad --to URL, a --from-sqlite that is not a sound "
               "engine store); 130 interrupted (run it again to continue).")
    parser.add_argument("--from-sqlite", required=True, metavar="DIR", type=Path,
                        help="the engine's data directory (the one holding engine.sqlite3)")
    parser.add_argument("--to", required=True, metavar="URL",
                        help="the PostgreSQL database (postgresql://user:password@host/db, with @ / : %% and spaces in "
                             "the password percent-encoded), as KB_ENGINE_DATABASE_URL")
    parser.add_argument("--json", action="store_true", help="print the final counts as JSON")


def run_migrate(args: argparse.Namespace) -> int:
    _check_driver()
    from kb_bridge.local_engine import database_url
    from kb_bridge.local_engine.errors import ConfigError
    from kb_bridge.local_engine.store.sqlite import export

    source_path = args.from_sqlite / "engine.sqlite3"
    if not source_path.is_file():
        raise Failed(f"--from-sqlite: no engine.sqlite3 in {args.from_sqlite}", USAGE)
    try:
        database_url.check(args.to, "--to")
    except ConfigError as exc:
        raise Failed(exc.message, USAGE) from None
    try:  # the whole source is checked before PostgreSQL is touched
        source = export.open_readonly(source_path)
        export.check(source)
        expected = export.totals(source)
        embedding = export.embedding(source)
    except (ConfigError, sqlite3.Error) as exc:
        raise Failed(f"--from-sqlite: {source_path}: {_reason(exc)}", USAGE) from None
    identity, dim = embedding if embedding is not None else (None, None)
    with_vectors = dim is not None and expected["vectors"] > 0
    skipped: list[dict[str, object]] = []
    with _failures(source_path), hint("run it again to continue"), Progress() as progress:
        def skip(document_id: object, reason: str) -> None:
            # An id is an integer in a store the engine wrote; a hand-made file may hold anything there.
            shown = document_id if isinstance(document_id, int) else repr(document_id)[:40]
            skipped.append({"id": shown, "reason": reason})
            progress.say(f"{PROG}: document {shown} skipped: {reason}")

        copied, found = _migrate(args.to, source, expected, identity if with_vectors else None, dim, progress, skip)
    if not with_vectors:
        expected["vectors"] = 0
    ok = all(found[key] >= expected[key] for key in expected) and not skipped
    _print_report(args, source_path, copied, skipped, expected, found, ok)
    return OK if ok else FAILED


def _check_driver() -> None:
    try:
        import psycopg  # noqa: F401 - only whether it is installed
    except ImportError:
        raise Failed("needs the PostgreSQL driver: pip install 'kb-bridge[postgres]'", USAGE) from None


@contextmanager
def _failures(source_path: Path) -> Iterator[None]:
    """The copy's failures as one line each (exit 1); what was copied stays, and a rerun resumes."""
    import psycopg

    from kb_bridge.local_engine.errors import EngineError

    try:
        yield
    except EngineError as exc:
        raise Failed(exc.message, FAILED) from exc
    except sqlite3.Error as exc:  # the source failed while being read
        raise Failed(f"--from-sqlite: {source_path}: cannot be read: {_reason(exc)}", FAILED) from exc
    except psycopg.Error as exc:  # the target refused a step other than one document (its schema, the index)
        raise Failed(f"PostgreSQL refused the migration: {_reason(exc)}", FAILED) from exc


def _migrate(url: str, source: sqlite3.Connection, expected: dict[str, int], identity: str | None, dim: int | None,
             progress: Progress, skip: Skip) -> tuple[int, dict[str, int]]:
    """Copy every document of the source into the database at `url`: (how many were copied, the target's counts)."""
    from kb_bridge.local_engine.store.postgres import importing, prepare_database
    from kb_bridge.local_engine.store.postgres.db import Database
    from kb_bridge.local_engine.store.sqlite import export

    with_vectors = identity is not None
    prepare_database(url)
    target = Database(url)
    with target.connection() as conn:
        importing.prepare(conn, identity, dim)
    progress.phase("copying", expected["documents"], "documents")
    if expected["vectors"] > 100_000:
        progress.say("the vector index is built once everything is copied: a few minutes per million vectors")
    copied = 0
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
    progress.say("vacuuming and analysing the copied tables, so the first searches run at full speed")
    with target.connection() as conn:
        importing.settle(conn)
        found = importing.totals(conn, with_vectors)
    target.close()
    return copied, found


def _print_report(args: argparse.Namespace, source_path: Path, copied: int, skipped: list[dict[str, object]],
                  expected: dict[str, int], found: dict[str, int], ok: bool) -> None:
    from kb_bridge.local_engine import database_url

    target_url = database_url.redacted(args.to)
    if args.json:
        print(json.dumps({"source": str(source_path), "target": target_url, "copied": copied, "skipped": skipped,
                          "expected": expected, "found": found, "ok": ok}))
        return
    print(f"copied {copied} document(s) to {target_url}"
          + (f"; skipped {len(skipped)} (named above): {', '.join(str(s['id']) for s in skipped)}" if skipped else ""))
    for key in ("documents", "chunks", "vectors", "tags"):
        mark = "ok" if found[key] >= expected[key] else "MISSING"
        print(f"  {key:<9} sqlite {expected[key]:>9}  postgresql {found[key]:>9}  {mark}")


def _copy(target: Database, documents: Sequence[StoredDocument], with_vectors: bool, skip: Skip) -> int:
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
