"""Looking around the knowledge base from a terminal: `kb-bridge list | collections | tags | jobs`, on the
handlers the MCP tools run (kb_list, kb_collections, kb_jobs) and, for tags, the engine's tag list. Each prints
a table, or JSON with --json; exit status as documents.py says (0, 1 refused or failed, 2 a usage error)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kb_bridge.cli.documents import table, with_tools
from kb_bridge.cli.exits import OK, add_command
from kb_bridge.collection_tags import PREFIX
from kb_bridge.errors import InvalidArgument
from kb_bridge.tools import registry
from kb_bridge.tools.spec import ToolContext

JOB_STATUSES = ("queued", "running", "done", "failed")


def add_arguments(commands: Any) -> None:
    listing = add_command(commands, "list", with_tools(_list), help="list documents, most recently updated first",
                          description="List documents as kb_list does, following its pages up to --limit.")
    listing.add_argument("--collection", help="only this collection (e.g. memory)")
    listing.add_argument("--tag", action="append", default=[], help="only documents with this tag (repeatable: all must match)")
    listing.add_argument("--since", help="only documents created (or --updated) since: an ISO date or date-time, or a span back from now (30m, 36h, 7d, 2w)")
    listing.add_argument("--until", help="only documents created (or --updated) before this date, date-time or span ago")
    listing.add_argument("--updated", action="store_true", help="--since/--until apply to the last update, not the creation")
    listing.add_argument("--limit", type=int, default=50, help="at most this many documents (default 50)")
    listing.add_argument("--json", action="store_true", help="print the documents as JSON")

    collections = add_command(commands, "collections", with_tools(_collections), help="the collections and their document counts")
    collections.add_argument("--json", action="store_true", help="print the collections as JSON")

    tags = add_command(commands, "tags", with_tools(_tags), help="the tags in use and how many documents have each")
    tags.add_argument("--json", action="store_true", help="print the tags as JSON")

    jobs = add_command(commands, "jobs", with_tools(_jobs), help="recent ingestion jobs, newest first")
    jobs.add_argument("--status", choices=JOB_STATUSES, help="only jobs in this state")
    jobs.add_argument("--limit", type=int, default=20, help="how many (default 20, at most 100)")
    jobs.add_argument("--json", action="store_true", help="print the jobs as JSON")


def _list(ctx: ToolContext, args: argparse.Namespace) -> int:
    if args.limit < 1:
        # Refused as kb_list refuses its own limit (`jobs --limit 0` is, by kb_jobs): below 1, no page is asked
        # for, and "No documents." would be a wrong answer.
        raise InvalidArgument("limit", "must be at least 1")
    arguments: dict[str, Any] = {"tags": args.tag}
    for key in ("collection", "since", "until"):
        if getattr(args, key) is not None:
            arguments[key] = getattr(args, key)
    if args.updated:
        arguments["time_field"] = "updated"
    documents: list[dict[str, Any]] = []
    total = 0
    while len(documents) < args.limit:
        page = registry.call(ctx, "kb_list", {**arguments, "limit": min(100, args.limit - len(documents))})
        documents += page["documents"]
        total = page["total"]
        if not page.get("next_cursor") or not page["documents"]:
            break
        arguments["cursor"] = page["next_cursor"]
    if args.json:
        print(json.dumps({"documents": documents, "total": total}, ensure_ascii=False))
        return OK
    if not documents:
        print("No documents.")
        return OK
    print(table(("id", "collection", "updated", "title"), [
        (str(d["id"]), d.get("collection") or "-", str(d.get("updated_at") or "-")[:19],
         d.get("title") or d.get("source_path") or "(untitled)") for d in documents]))
    print(f"\n{len(documents)} of {total} document(s).")
    return OK


def _collections(ctx: ToolContext, args: argparse.Namespace) -> int:
    result = registry.call(ctx, "kb_collections", {})
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
        return OK
    rows = [(c["name"], str(c["documents"]), str(c.get("latest_update") or "-")[:19]) for c in result["collections"]]
    print(table(("collection", "documents", "latest update"), rows) if rows else "No collections.")
    return OK


def _tags(ctx: ToolContext, args: argparse.Namespace) -> int:
    # The collection tags are the collections (`kb-bridge collections`); what is left are the agents' own.
    tags = [t for t in ctx.engine.list_tags().get("tags", []) if not str(t.get("name", "")).startswith(PREFIX)]
    if args.json:
        print(json.dumps({"tags": tags}, ensure_ascii=False))
        return OK
    print(table(("documents", "tag"), [(str(t.get("documents", "-")), str(t["name"])) for t in tags]) if tags else "No tags.")
    return OK


def _jobs(ctx: ToolContext, args: argparse.Namespace) -> int:
    arguments: dict[str, Any] = {"limit": args.limit}
    if args.status is not None:
        arguments["status"] = args.status
    result = registry.call(ctx, "kb_jobs", arguments)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
        return OK
    rows = [(str(j["id"]), j.get("type") or "-", j["status"], str(j.get("created_at") or "-")[:19],
             str(j.get("document_id") or "-"), j.get("error") or j.get("filename") or "") for j in result["jobs"]]
    print(table(("job", "type", "status", "created", "document", "file / error"), rows) if rows else "No jobs.")
    return OK
