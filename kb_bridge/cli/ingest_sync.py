"""One pass of `kb-bridge ingest` over its roots (a run, or one step of --watch): plan against what the roots
stored before, then carry the plan out and remember the result in the state file."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kb_bridge import collection_tags
from kb_bridge.cli import ingest_state
from kb_bridge.cli.ingest_files import Found, Root
from kb_bridge.cli.ingest_plan import Plan, make_plan, stored_by_engine, stored_by_state
from kb_bridge.cli.ingest_run import Ingestion, Outcome, sha256_of
from kb_bridge.cli.ingest_state import Known, State
from kb_bridge.cli.progress import Progress
from kb_bridge.client.engine import EngineClient


@dataclasses.dataclass
class Sync:
    """One pass over the roots: what was planned and, unless a dry run, what happened."""

    plan: Plan
    outcomes: list[Outcome]


def state_path(args: argparse.Namespace, engine_url: str, roots: Sequence[Root]) -> Path:
    return args.state if args.state else ingest_state.default_path(engine_url, args.collection, roots)


def synchronise(client: EngineClient, args: argparse.Namespace, found: Found, progress: Progress,
                on_outcome: Callable[[Outcome], None]) -> Sync:
    """Plan against what the roots stored before (the state file when the engine still agrees with it, else the
    engine's listing), then, unless --dry-run, carry the plan out and remember the result."""
    collection_tag = collection_tags.tag_for(args.collection)
    path = state_path(args, client.settings.url, found.roots)
    state = ingest_state.load(path)
    marks = {root.tag: _mark(client, collection_tag, root) for root in found.roots}
    fresh = state is not None and all(state.roots.get(tag) == mark for tag, mark in marks.items())
    stored = stored_by_state(state.files) if state is not None and fresh else \
        stored_by_engine(client, collection_tag, found.roots)
    known = state.files if state is not None else {}
    plan = make_plan(found.candidates, found.roots, stored, known, args.prune, sha256_of, found.problems)
    if args.dry_run:
        return Sync(plan, [])
    entries = {document.source_path: Known(-1, 0, 0, document.sha256 or "", document.id, document.root_tag or "")
               for document in stored}
    ingestion = Ingestion(client, args.collection, args.tags, progress, entries, on_outcome)
    ingestion.run(plan)
    after = {root.tag: _mark(client, collection_tag, root) for root in found.roots}
    ingest_state.save(path, State(ingestion.entries, after))
    return Sync(plan, ingestion.outcomes)


def _mark(client: EngineClient, collection_tag: str, root: Root) -> list[Any]:
    """How many documents the root has, and its newest change: equal at the next run means nothing changed."""
    page = client.list_documents([("tag", collection_tag), ("tag", root.tag), ("limit", 1)])
    newest = (page.get("documents") or [{}])[0]
    return [int(page.get("total") or 0), newest.get("updated_at"), newest.get("id")]


