"""The engine's part of `kb-bridge migrate` (cli/migrate.py): copy a SQLite store into PostgreSQL with the
same document ids, versions, tags, chunks and vectors (nothing is re-embedded), and each note's history: its
kept earlier versions, who changed it (changed_by) and its duplicate keys (note_keys; engine 3.9).

Two steps. `plan` checks everything before PostgreSQL is touched: the driver, the URL, and the source, which
is not trusted (store/sqlite/export.py) and is checked whole; a ConfigError says what is wrong with which
option. `run` copies in batches of BATCH documents, each in one transaction, skipping a document the target
already holds (same id and content), so a rerun after an interruption (or a second run) copies only what is
missing; a different document under the same id in the target is reported like a refused one, never
overwritten nor counted as copied. One
document PostgreSQL cannot hold (a NUL character an older engine took) never stops the copy: it is reported
through `skipped` with the reason, and the rest is copied. A failure of the copy itself is an EngineError,
and what was copied stays. The report compares the counts of both stores. Jobs are not copied: a source
with jobs not done yet is refused before PostgreSQL is touched (`refuse_unfinished` says why).

To copy something more with each document, extend `_copy` and store/postgres/importing.py's `write`.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb_bridge.environment import Env

from . import database_url
from .config import DATABASE_FILE, DATABASE_URL_VARIABLE
from .errors import ConfigError, EngineError
from .progress import Progress

if TYPE_CHECKING:
    from .store.base import StoredDocument
    from .store.postgres.db import Database

BATCH = 200
# Told of each document skipped: its id as shown, and why.
Skip = Callable[[object, str], None]


@dataclasses.dataclass(frozen=True)
class Migration:
    """A checked source and target, for `run`."""

    source_path: Path
    # The target; never shown with its password (database_url.redacted).
    url: str = dataclasses.field(repr=False)
    source: sqlite3.Connection = dataclasses.field(repr=False)
    expected: dict[str, int]
    # The model that made the source's vectors, and their size; None when there are no vectors to copy.
    identity: str | None
    dim: int | None
    # The source's jobs not done yet, (id, type): `run` refuses while there are any.
    unfinished: tuple[tuple[int, str], ...] = ()


def target(to: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """The PostgreSQL URL to copy into and the setting it came from: --to, else KB_ENGINE_DATABASE_URL. The
    variable is the way that keeps the password private: a command's arguments are readable by every user of
    the machine (ps, /proc/PID/cmdline) for as long as it runs, and a migration runs for minutes."""
    if to is not None:
        return to, "--to"
    url = Env(environ).raw(DATABASE_URL_VARIABLE)
    if url is None:
        raise ConfigError(f"no target: set {DATABASE_URL_VARIABLE} (or give --to)")
    return url, DATABASE_URL_VARIABLE


def plan(data_dir: Path, url: str, setting: str = "--to") -> Migration:
    """Check the driver, `url` (given by `setting`) and the store in `data_dir` (--from-sqlite), before PostgreSQL
    is touched; ConfigError naming the option."""
    _check_driver()
    from .store.sqlite import export

    source_path = data_dir / DATABASE_FILE
    if not source_path.is_file():
        raise ConfigError(f"--from-sqlite: no {DATABASE_FILE} in {data_dir}")
    database_url.check(url, setting)
    try:
        source = export.open_readonly(source_path)
        export.check(source)
        expected = export.totals(source)
        embedding = export.embedding(source)
        unfinished = tuple(export.unfinished_jobs(source))
    except (ConfigError, sqlite3.Error) as exc:
        raise ConfigError(f"--from-sqlite: {source_path}: {_reason(exc)}") from None
    identity, dim = embedding if embedding is not None else (None, None)
    if dim is None or expected["vectors"] == 0:
        identity = None
    return Migration(source_path, url, source, expected, identity, dim, unfinished)


def run(migration: Migration, progress: Progress, skipped: Skip) -> dict[str, Any]:
    """Copy every document not yet in the target; the report `kb-bridge migrate --json` prints. EngineError,
    before PostgreSQL is touched, while the source has jobs not done yet (`refuse_unfinished`)."""
    refuse_unfinished(migration)
    skips: list[dict[str, object]] = []

    def skip(document_id: object, reason: str) -> None:
        # An id is an integer in a store the engine wrote; a hand-made file may hold anything there.
        shown = document_id if isinstance(document_id, int) else repr(document_id)[:40]
        skips.append({"id": shown, "reason": reason})
        skipped(shown, reason)

    with _failures(migration.source_path):
        copied, found = _copy_all(migration, progress, skip)
    expected = dict(migration.expected)
    if migration.identity is None:
        expected["vectors"] = 0
    ok = all(found[key] >= expected[key] for key in expected) and not skips
    return {"source": str(migration.source_path), "target": database_url.redacted(migration.url), "copied": copied,
            "skipped": skips, "expected": expected, "found": found, "ok": ok}


def refuse_unfinished(migration: Migration) -> None:
    """Refuse a source whose engine stopped with jobs not done yet. They are normal (the engine resumes them
    when it starts) and the engine answered 202 for each, but only documents are copied: a job's row, its
    Idempotency-Key and its staged upload (uploads/ beside the SQLite file; in the database on PostgreSQL)
    would have to be carried over consistently with the target's own queue, so the note or file it brings
    would be lost without a word. Letting the source's engine finish them (or cancelling them) first is
    the honest way round."""
    if not migration.unfinished:
        return
    shown = ", ".join(f"{kind} job {job_id}" for job_id, kind in migration.unfinished[:10])
    more = f" and {len(migration.unfinished) - 10} more" if len(migration.unfinished) > 10 else ""
    raise EngineError(
        f"--from-sqlite: {migration.source_path} holds {len(migration.unfinished)} job(s) not done yet ({shown}{more}): "
        "their notes and files are not documents yet and would not be copied. Start the engine on that directory "
        "(kb-bridge engine --data DIR) and let them finish (kb-bridge jobs --status queued lists them), or cancel "
        "them (DELETE /api/v1/jobs/{id}), stop it, then run migrate again; nothing was written to PostgreSQL")


def _check_driver() -> None:
    try:
        import psycopg  # noqa: F401 - only whether it is installed
    except ImportError:
        raise ConfigError("needs the PostgreSQL driver: pip install 'kb-bridge[postgres]'") from None


@contextmanager
def _failures(source_path: Path) -> Iterator[None]:
    """The copy's failures as EngineErrors of one line each; what was copied stays, and a rerun resumes."""
    import psycopg

    try:
        yield
    except EngineError:
        raise
    except sqlite3.Error as exc:  # the source failed while being read
        raise EngineError(f"--from-sqlite: {source_path}: cannot be read: {_reason(exc)}") from exc
    except psycopg.Error as exc:  # the target refused a step other than one document (its schema, the index)
        raise EngineError(f"PostgreSQL refused the migration: {_reason(exc)}") from exc


def _copy_all(migration: Migration, progress: Progress, skip: Skip) -> tuple[int, dict[str, int]]:
    """Copy every document of the source: (how many were copied, the target's counts)."""
    from .store.postgres import importing, prepare_database
    from .store.postgres.db import Database
    from .store.sqlite import export

    expected = migration.expected
    with_vectors = migration.identity is not None
    prepare_database(migration.url)
    target = Database(migration.url)
    with target.connection() as conn:
        importing.prepare(conn, migration.identity, migration.dim)
    progress.phase("copying", expected["documents"], "documents")
    if expected["vectors"] > 100_000:
        progress.say("the vector index is built once everything is copied: a few minutes per million vectors")
    copied = 0
    for batch in export.all_documents(migration.source, BATCH):
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


def _copy(target: Database, documents: Sequence[StoredDocument], with_vectors: bool, skip: Skip) -> int:
    """Copy the documents not yet in the target, in one transaction; if PostgreSQL refuses that, one
    transaction per document, so that only the documents it refuses are skipped (and reported)."""
    import psycopg

    from .store.postgres import importing

    # A value PostgreSQL cannot take (psycopg.Error: DataError, IntegrityError...), or a vector of the wrong
    # size (ValueError). The target going away is StoreUnavailable, which stops the migration.
    refused = (psycopg.Error, ValueError, TypeError)
    try:
        return _copy_new(target, documents, with_vectors, skip)
    except refused:
        pass
    copied = 0
    for document in documents:
        try:
            copied += _copy_new(target, [document], with_vectors, skip)
        except refused as exc:
            skip(document.id, importing.refused_because(exc))
    return copied


def _copy_new(target: Database, documents: Sequence[StoredDocument], with_vectors: bool, skip: Skip) -> int:
    """Copy, in one transaction, the documents the target does not hold yet. One whose id the target holds
    with another document is skipped and reported (once the transaction commits): it is never overwritten,
    nor taken for already copied."""
    from .store.postgres import importing

    with target.write() as conn:
        todo, clashes = importing.sorted_out(conn, documents)
        importing.write(conn, todo, with_vectors)
    for document_id in clashes:
        skip(document_id, "the target already holds a different document with this id (not this store's copy)")
    return len(todo)


def _reason(exc: BaseException) -> str:
    message = getattr(exc, "message", None) or str(exc).strip() or type(exc).__name__
    return str(message).splitlines()[0][:300]
