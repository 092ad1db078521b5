"""The knowledge base from a terminal: `kb-bridge search | add | get | delete`, on the very handlers the MCP
tools run (kb_search, kb_addnote, kb_get, kb_delete), against the engine at KB_ENGINE_URL with KB_API_KEY
(browsing.py adds list, collections, tags and jobs the same way).

Exit status: 0 success; 1 not found, refused, or the engine failed; 2 a usage error (argparse's own, or an
argument the tool's validation refuses, named as the tool names it). exits.py maps the errors.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import shutil
import sys
from collections.abc import Callable, Sequence
from typing import Any

from kb_bridge import control_chars
from kb_bridge.cli.configured import with_settings
from kb_bridge.cli.exits import FAILED, OK, add_command
from kb_bridge.client.engine import EngineClient
from kb_bridge.digits import id_number
from kb_bridge.settings import Settings
from kb_bridge.tools import registry, render
from kb_bridge.tools.arguments import LARGEST_ID
from kb_bridge.tools.spec import ToolContext
from kb_bridge.uploads.factory import make_upload_store

Handler = Callable[[ToolContext, argparse.Namespace], int]


def with_tools(handler: Handler) -> Callable[[argparse.Namespace], int]:
    """`handler(ctx, args)` as a command: the tools' context built from the settings, its engine closed after."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace, settings: Settings) -> int:
        ctx = ToolContext(engine=EngineClient(settings.engine), uploads=make_upload_store(settings), settings=settings)
        try:
            return handler(ctx, args)
        finally:
            ctx.engine.close()

    return with_settings(run)


def ascii_int(text: str) -> int:
    """An id or version argument: 1 to LARGEST_ID in ASCII digits. int() also takes "5_7" (57), "٥٧" (57), " 57"
    and "+57", each naming a document the user did not write (`kb-bridge delete 5_7` deleted document 57)."""
    number = id_number(text, LARGEST_ID)
    if number is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number in ASCII digits (1-{LARGEST_ID})")
    return number


def add_arguments(commands: Any) -> None:
    search = add_command(commands, "search", with_tools(_search),
                         help="search the knowledge base (a table; --json for the results)",
                         description="Search as kb_search does: hybrid by default.")
    search.add_argument("query", metavar="QUERY")
    search.add_argument("--collection", help="only this collection (e.g. memory)")
    search.add_argument("--top", type=int, default=10, help="how many results (default 10, at most 50)")
    search.add_argument("--mode", choices=("hybrid", "fts", "vector"), help="search mode (default hybrid)")
    search.add_argument("--json", action="store_true", help="print the results as JSON")

    add = add_command(commands, "add", with_tools(_add),
                      help="add a note (TEXT, or - to read it from stdin) and wait until it is searchable")
    add.add_argument("text", metavar="TEXT|-")
    add.add_argument("--collection", default="documents", help="collection (default documents; memory for agent memory)")
    add.add_argument("--title", help="title (default: from the text)")
    add.add_argument("--tags", help="comma-separated tags")
    add.add_argument("--allow-duplicate", action="store_true",
                     help="add it even if the collection has a note with the same text")
    add.add_argument("--json", action="store_true", help="print the result as JSON")

    get = add_command(commands, "get", with_tools(_get), help="show one document: metadata and text")
    get.add_argument("document_id", metavar="ID", type=ascii_int)
    get.add_argument("--version", type=ascii_int, help="show this earlier version of a note")
    get.add_argument("--history", action="store_true", help="list a note's versions (number, time, who changed it)")
    get.add_argument("--json", action="store_true", help="print the document as JSON (with its versions)")

    history = add_command(commands, "history", with_tools(_get), help="a note's versions (the same as get ID --history)")
    history.add_argument("document_id", metavar="ID", type=ascii_int)
    history.add_argument("--json", action="store_true", help="print the versions as JSON")
    history.set_defaults(history=True, version=None)

    delete = add_command(commands, "delete", with_tools(_delete), help="delete one document for good")
    delete.add_argument("document_id", metavar="ID", type=ascii_int)
    delete.add_argument("--json", action="store_true", help="print the result as JSON")


def _passage(hit: dict[str, Any]) -> str:
    """The passage that matched (the engine's `snippet`, 3.11), else the hit's text from its start."""
    snippet = hit.get("snippet")
    text = snippet.get("text") if isinstance(snippet, dict) else None
    return " ".join(str(text or hit.get("text") or "").split())


def _search(ctx: ToolContext, args: argparse.Namespace) -> int:
    arguments: dict[str, Any] = {"query": args.query, "top": args.top}
    for key in ("collection", "mode"):
        if getattr(args, key) is not None:
            arguments[key] = getattr(args, key)
    result = registry.call(ctx, "kb_search", arguments)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
        return OK
    rows = [
        (f"{hit['score']:.3f}" if isinstance(hit.get("score"), (int, float)) else "-", str(hit["document_id"]),
         hit.get("collection") or "-", hit.get("title") or hit.get("source_path") or "(untitled)",
         _passage(hit))
        for hit in result["results"]
    ]
    if not rows:
        print(f"No results for {args.query!r}.")
        return OK
    print(table(("score", "id", "collection", "title", "snippet"), rows))
    return OK


def printable(text: str) -> str:
    """`text` for a terminal: stored text is written by agents and files, so each control character but newline
    and tab is shown as an escape (`\\x1b`), not run."""
    return control_chars.escaped(text, keep="\t\n")


def table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell; the last one cut to the terminal's width. Cells are printable()."""
    rows = [tuple(printable(cell) for cell in row) for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers[:-1])]
    widths = [min(w, 40) for w in widths]
    room = max(20, shutil.get_terminal_size((120, 20)).columns - sum(widths) - 2 * len(widths))

    def line(cells: tuple[str, ...]) -> str:
        fixed = [cell[:w].ljust(w) for cell, w in zip(cells[:-1], widths, strict=True)]
        last = cells[-1] if len(cells[-1]) <= room else cells[-1][: room - 1] + "…"
        return "  ".join([*fixed, last]).rstrip()

    return "\n".join([line(headers), line(tuple("-" * len(h) for h in headers)), *(line(r) for r in rows)])


def _stdin_text() -> str:
    """stdin in the locale's encoding, bytes it cannot decode kept as lone surrogates (as Python keeps them in
    argv) so that the tool refuses them naming `text`; a UTF-8 locale's sys.stdin would raise on them instead."""
    return io.TextIOWrapper(sys.stdin.buffer, encoding=sys.stdin.encoding, errors="surrogateescape").read()


def _add(ctx: ToolContext, args: argparse.Namespace) -> int:
    text = _stdin_text() if args.text == "-" else args.text
    arguments: dict[str, Any] = {"text": text, "collection": args.collection, "wait": True}
    if args.allow_duplicate:
        arguments["allow_duplicate"] = True
    if args.title:
        arguments["title"] = args.title
    if args.tags:
        arguments["tags"] = [t.strip() for t in args.tags.split(",") if t.strip()]
    result = registry.call(ctx, "kb_addnote", arguments)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    elif result["duplicate_of"] is not None:
        print(f"Not added: document #{result['duplicate_of']} in {result['collection']} has this text "
              "(--allow-duplicate adds it anyway).")
    elif result["status"] == "done":
        print(f"Added document #{result['document_id']} to {result['collection']}.")
    else:
        print(f"Queued as job {result['job_id']} ({result['status']}); it becomes searchable when the job is done.")
    return OK


def _get(ctx: ToolContext, args: argparse.Namespace) -> int:
    arguments: dict[str, Any] = {"document_id": args.document_id}
    if args.version is not None:
        arguments["version"] = args.version
    result = registry.call(ctx, "kb_get", arguments)
    document = result["documents"][0]
    if args.json:
        shown = {"id": document["id"], "versions": document.get("versions", [])} if args.history else document
        print(json.dumps(shown, ensure_ascii=False))
        return OK
    if args.history:
        rows = [(str(v["version"]) + (" (current)" if i == 0 else ""), v["updated_at"] or "?",
                 v["changed_by"] or "unknown") for i, v in enumerate(document["versions"])]
        print(table(("version", "updated", "changed by"), rows) if rows else "No versions (not a note, or an "
              "engine before 3.9).")
        return OK
    tags = ", ".join(document["tags"]) or "-"
    title = render.one_line(document["title"] or document["source_path"] or f"Document {document['id']}")
    print(printable(f"# {title}\n"))
    print(printable(f"id {document['id']} · {document['doc_type'] or '?'} · collection {document['collection'] or '-'}"
                    f" · tags {tags} · version {document['version']}"))
    source = render.one_line(document["source_path"] or "-")
    print(printable(f"source {source} · updated {document['updated_at'] or '?'}\n"))
    print(printable(document.get("content") or ""))
    return OK


def _delete(ctx: ToolContext, args: argparse.Namespace) -> int:
    result = registry.call(ctx, "kb_delete", {"document_id": args.document_id})
    if args.json:
        print(json.dumps(result))
    elif result["deleted"]:
        print(f"Deleted document #{args.document_id}.")
    else:
        print(f"kb-bridge delete: document {args.document_id} not found", file=sys.stderr)
    return OK if result["deleted"] else FAILED
