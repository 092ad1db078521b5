"""The writes that both SQL stores make the same way, over their own SQL modules (`sqlite/documents.py` or
`postgres/documents.py`, which share names and signatures); the counterpart of sql_reads.py.

Every write that search follows goes through `_changing()`: under the store's write lock, one transaction
(its change log rows written by the database in it: sqlite/schema.py's triggers, postgres/index_log.py), and
then the derived indexes catch up, so the indexes change in commit order and the write returns only once
search finds it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..errors import NotFound, ValidationError
from .base import JSON, PreparedChunks, check_note, check_version, note_text_key

if TYPE_CHECKING:
    from .derived import DerivedIndexes, Transactions


class SqlWrites:
    db: Transactions
    indexes: DerivedIndexes
    sql_documents: ModuleType
    sql_jobs: ModuleType
    sql_history: ModuleType
    sql_note_keys: ModuleType
    keep_versions: int  # earlier versions kept per document (KB_ENGINE_KEEP_VERSIONS)
    _write_lock: threading.RLock

    if TYPE_CHECKING:  # the store mixes in SqlReads too

        def get_document(self, doc_id: int, detail: bool = False) -> JSON: ...

        def list_versions(self, doc_id: int) -> list[JSON]: ...

    def write_meta(self, key: str, value: str | None) -> None:
        with self._write_lock:
            with self.db.write() as conn:
                self.sql_documents.write_meta(conn, key, value)

    def writes_held(self) -> contextlib.AbstractContextManager[object]:
        return self._write_lock

    @contextlib.contextmanager
    def _changing(self) -> Iterator[Any]:
        """A write transaction after which the derived indexes catch up (so it returns searchable).

        A write answers the document as it left it, read in its transaction: read once the lock is let go, it
        could name a version another writer made meanwhile, which a client takes for its own and sends as
        If-Match, writing over a change it never saw."""
        with self._write_lock:
            with self.db.write() as conn:
                yield conn
            self.indexes.catch_up()

    def delete_document(self, doc_id: int, if_match: Collection[str] | None = None) -> None:
        with self._changing() as conn:
            if if_match is not None:
                # Checked on the row the delete then removes (locked on PostgreSQL, the write lock on SQLite).
                check_version(self.sql_documents.require_document(conn, doc_id)["version"], doc_id, if_match)
            self.sql_documents.delete_document(conn, doc_id)

    def replace_note(self, doc_id: int, title: str, text: str, chunks: PreparedChunks,
                     if_match: Collection[str] | None, now: str, changed_by: str | None = None) -> JSON:
        with self._changing() as conn:
            row = self.sql_documents.require_document(conn, doc_id)
            check_note(row["doc_type"], row["version"], doc_id, if_match)
            self._keep_current(conn, doc_id)
            self.sql_documents.delete_chunks(conn, doc_id)
            self.sql_documents.update_note(conn, doc_id, title, text, now, changed_by)
            chunk_ids = self.sql_documents.insert_chunks(conn, doc_id, title, chunks.texts)
            self.sql_documents.store_vectors(conn, chunk_ids, chunks.vectors)
            self.sql_jobs.record_finished_update(conn, doc_id, now)
            self._rekey(conn, doc_id, text_key=note_text_key(text))
            written: JSON = self.sql_documents.get_document(conn, doc_id)
        return written

    def move_document(self, doc_id: int, source_path: str | None, title: str | None,
                      if_match: Collection[str] | None, now: str) -> JSON:
        with self._changing() as conn:
            row = self.sql_documents.require_document(conn, doc_id)
            check_version(row["version"], doc_id, if_match)
            if row["doc_type"] == "note":  # a move always raises the version: the one it replaces is kept
                self._keep_current(conn, doc_id)
            self.sql_documents.move_document(conn, doc_id, source_path, title, now)
            written: JSON = self.sql_documents.get_document(conn, doc_id)
        return written

    def restore_versions(self, doc_id: int, versions: Sequence[Mapping[str, Any]]) -> JSON:
        with self.db.write() as conn:
            row = self.sql_documents.require_document(conn, doc_id)
            if row["doc_type"] != "note":
                raise ValidationError(f"document {doc_id} is a {row['doc_type']} file; only notes have versions")
            kept = sorted(versions, key=lambda v: int(v["version"]))[-self.keep_versions:] if self.keep_versions else []
            self.sql_history.replace_all(conn, doc_id, kept)
            if kept:
                # The current version stays the newest: numbers keep their order.
                self.sql_history.raise_version(conn, doc_id, int(kept[-1]["version"]) + 1)
        return {"id": doc_id, "versions": self.list_versions(doc_id)}

    def _keep_current(self, conn: Any, doc_id: int) -> None:
        """Keep a note's current version in its history before a change raises the version, so every number
        the engine has answered stays readable (until `keep_versions` drops it, oldest first)."""
        self.sql_history.archive(conn, doc_id)
        self.sql_history.prune(conn, doc_id, self.keep_versions)

    def _rekey(self, conn: Any, doc_id: int, text_key: str | None = None) -> None:
        """Keep a keyed note's duplicate key true after a change: its new text (`text_key`) or, when its
        scope tag went, the one tag with the scope's prefix that replaced it (a move between collections,
        `collection:a` to `collection:b`). A key another note holds, or no such tag, leaves it without one."""
        held = self.sql_note_keys.key_of(conn, doc_id)
        if held is None:
            return
        scope, old_key, job_id = held
        tags = self.sql_documents.tag_state(conn, doc_id)["tags"]
        if scope not in tags:
            prefix = scope[: scope.index(":") + 1] if ":" in scope else scope
            successors = [tag for tag in tags if tag.startswith(prefix)]
            scope = successors[0] if len(successors) == 1 else ""
        new_key = text_key or old_key
        if (scope, new_key) == (held[0], old_key):
            return
        self.sql_note_keys.release(conn, doc_id)
        if scope:
            self.sql_note_keys.hold(conn, scope, new_key, job_id, doc_id)

    def change_tags(self, doc_id: int, add: Sequence[str], remove: Sequence[str], if_match: Collection[str] | None,
                    now: str, missing_is_not_found: bool = False) -> JSON:
        with self._changing() as conn:
            row = self.sql_documents.require_document(conn, doc_id)
            check_version(row["version"], doc_id, if_match)
            held = self.sql_documents.tag_state(conn, doc_id)["tags"]
            if missing_is_not_found:
                for tag in remove:
                    if tag not in held:
                        raise NotFound(f"document {doc_id} has no tag {tag!r}")
            if row["doc_type"] == "note" and _steps_version(held, add, remove):
                self._keep_current(conn, doc_id)
            state: JSON = self.sql_documents.change_tags(conn, doc_id, add, remove, now)
            self._rekey(conn, doc_id)
            return state

    def add_tags(self, doc_id: int, tags: Sequence[str], now: str) -> JSON:
        return self.change_tags(doc_id, tags, (), None, now)

    def remove_tag(self, doc_id: int, tag: str, now: str) -> JSON:
        return self.change_tags(doc_id, (), (tag,), None, now, missing_is_not_found=True)

    def patch_tags(self, doc_id: int, add: Sequence[str], remove: Sequence[str], if_match: Collection[str] | None,
                   now: str) -> JSON:
        return self.change_tags(doc_id, add, remove, if_match, now)


def _steps_version(held: Collection[str], add: Sequence[str], remove: Sequence[str]) -> bool:
    """Whether removing then adding these tags raises the version, as the dialects' change_tags decide it (any
    row deleted or inserted: a held tag removed and added back counts); asked before the change, which is
    when the version it replaces can still be kept."""
    left = set(held) - set(remove)
    return left != set(held) or any(tag not in left for tag in add)
