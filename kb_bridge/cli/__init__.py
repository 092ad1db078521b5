"""The `kb-bridge` command: serve | stdio | engine | demo | check | ingest | migrate | token | tools, and for
people: search | add | get | delete | export | import | backup."""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import sys
from collections.abc import Sequence

from kb_bridge import __version__
from kb_bridge.errors import SettingsError
from kb_bridge.logs import configure_logging
from kb_bridge.settings import Settings, load_settings
from kb_bridge.uploads.factory import check_staging

logger = logging.getLogger("kb_bridge.cli")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kb-bridge",
        description="An MCP server that gives AI agents a knowledge base (search, notes, files, memory).",
        epilog="Configuration comes from KB_* environment variables; see the README's configuration table.",
    )
    parser.add_argument("--version", action="version", version=f"kb-bridge {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = commands.add_parser("serve", help="serve MCP over Streamable HTTP with gunicorn (same as gunicorn -c gunicorn.conf.py)")
    serve.add_argument("--bind", metavar="HOST:PORT", help="address to listen on (env KB_BIND, default 127.0.0.1:8765)")
    serve.add_argument("--workers", type=int, metavar="N", help="gunicorn worker processes (env KB_WORKERS, default 2)")

    commands.add_parser("stdio", help="serve MCP over stdin/stdout (for Claude Desktop and other local clients)")

    commands.add_parser("engine", help="run the bundled local kb engine (see `kb-bridge engine --help`)")

    demo = commands.add_parser("demo", help="run the local engine and the bridge together, with a sample corpus")
    demo.add_argument("--data", metavar="DIR", help="engine data directory (default: a per-user data directory)")
    demo.add_argument("--port", type=int, default=8765, help="bridge port on 127.0.0.1 (default 8765)")
    demo.add_argument("--engine-port", type=int, default=8000, help="engine port on 127.0.0.1 (default 8000)")
    demo.add_argument("--no-sample", action="store_true", help="do not load the sample corpus")

    check = commands.add_parser("check", help="validate the configuration and reach the engine; exit non-zero on a problem")
    check.add_argument("--json", action="store_true", help="print the report as JSON")

    ingest = commands.add_parser(
        "ingest", help="load files and folders into the knowledge base (skips unchanged files, replaces changed ones)",
        description="Upload every supported file under PATH to the engine (KB_ENGINE_URL, KB_API_KEY) as a bulk "
                    "job, wait until each is indexed, and print what was added, updated, skipped or failed. "
                    "A rerun skips what is already stored and continues an interrupted run. Symbolic links "
                    "are followed only when they point inside the paths given; others are skipped and reported.",
        epilog="Exit status: 0 all files added, updated or skipped; 1 a file failed or the engine was "
               "unreachable; 2 a usage or configuration error; 130 interrupted (Ctrl-C).")
    from kb_bridge.cli.ingest import add_arguments

    add_arguments(ingest)

    migrate = commands.add_parser(
        "migrate", help="copy a local engine's SQLite store into PostgreSQL (ids, versions, vectors kept)",
        description="Copy documents, chunks, vectors (no re-embedding), tags and versions from a local engine's "
                    "SQLite data directory into a PostgreSQL database for KB_ENGINE_DATABASE_URL. Resumable and "
                    "idempotent: a rerun copies only what is missing. Counts are compared at the end.",
        epilog="Exit status: 0 copied and the counts match; 1 a document was skipped (named on stderr), counts "
               "differ or the database failed; 2 usage error (a bad --to URL, a --from-sqlite that is not a sound "
               "engine store); 130 interrupted (run it again to continue).")
    from kb_bridge.cli.migrate import add_arguments as add_migrate_arguments

    add_migrate_arguments(migrate)

    token = commands.add_parser(
        "token", help="print a new random token (for KB_MCP_API_KEY), or `token new NAME` for a named token",
        description="Without a subcommand: print a new random token for KB_MCP_API_KEY (full access).",
    )
    token_commands = token.add_subparsers(dest="token_command", metavar="SUBCOMMAND")
    new = token_commands.add_parser(
        "new", help="make a named token with scopes (and collections) for KB_MCP_TOKENS_FILE",
        description="Print a new random token and the [[token]] entry to paste into the KB_MCP_TOKENS_FILE "
                    "file. The file keeps only the token's SHA-256: give the token to the agent now; it is "
                    "not shown again.",
        epilog="Example: kb-bridge token new research-agent --scopes kb:read --collections documents",
    )
    new.add_argument("name", metavar="NAME", help="the token's name in logs: letters, digits, '.', '_' or '-'")
    new.add_argument("--scopes", required=True, metavar="SCOPES",
                     help="comma-separated: kb:read (search, get, list), kb:write (add, update, upload), kb:delete")
    new.add_argument("--collections", metavar="NAMES", help="comma-separated collections the token is limited to (default: all)")
    new.add_argument("--json", action="store_true", help="print the token and the entry as JSON")

    from kb_bridge.cli import backup, people, transfer

    people.add_arguments(commands)
    transfer.add_arguments(commands)
    backup.add_arguments(commands)

    tools_cmd = commands.add_parser("tools", help="list the tools this configuration offers, with their size in tools/list")
    tools_cmd.add_argument("--json", action="store_true", help="print the tools/list payload itself")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["engine"]:
        # Everything after `engine` belongs to the engine's own parser (argparse cannot pass
        # options through a subcommand untouched).
        from kb_bridge.local_engine.cli import main as engine_main  # only this command needs the engine

        return engine_main(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "token":
        if args.token_command == "new":
            from kb_bridge.cli.tokens import new_token

            return new_token(args)
        print(secrets.token_urlsafe(32))
        return 0
    if args.command == "serve":
        return _serve(args)
    if args.command == "migrate":
        from kb_bridge.cli.migrate import run_migrate

        return run_migrate(args)
    if args.command == "backup":
        from kb_bridge.cli.backup import run_backup

        return run_backup(args)
    try:
        settings = load_settings()
        if args.command == "stdio":
            check_staging(settings)
    except SettingsError as exc:
        print(f"kb-bridge: configuration error: {exc}", file=sys.stderr)
        return 2
    if args.command == "stdio":
        configure_logging(settings.server.log_level, settings.server.log_json, settings.secrets())
        from kb_bridge.protocol.stdio import run_stdio

        run_stdio(settings)
        return 0
    if args.command == "tools":
        return _tools(settings, args.json)
    if args.command == "check":
        from kb_bridge.cli.check import run_check

        return run_check(settings, as_json=args.json)
    if args.command == "ingest":
        return _ingest(settings, args)
    if args.command in ("search", "add", "get", "delete"):
        from kb_bridge.cli.people import run_people_command

        configure_logging("WARNING", False, settings.secrets())
        return run_people_command(args, settings)
    if args.command in ("export", "import"):
        from kb_bridge.cli.transfer import run_export, run_import

        configure_logging("WARNING", False, settings.secrets())
        return (run_export if args.command == "export" else run_import)(args, settings)
    if args.command == "demo":
        from kb_bridge.cli.demo import run_demo

        return run_demo(args)
    raise AssertionError(args.command)


def _serve(args: argparse.Namespace) -> int:
    # Flags become the environment variables the one settings reader reads.
    if args.bind:
        os.environ["KB_BIND"] = args.bind
    if args.workers:
        os.environ["KB_WORKERS"] = str(args.workers)
    try:
        settings = load_settings()  # fail here, readably, rather than inside gunicorn's master
        check_staging(settings)
    except SettingsError as exc:
        print(f"kb-bridge: configuration error: {exc}", file=sys.stderr)
        return 2
    from kb_bridge.serving.gunicorn import run_server

    # gunicorn runs in this process: it is the master (PID 1 in a container gets the signals).
    return run_server(settings)


def _ingest(settings: Settings, args: argparse.Namespace) -> int:
    from kb_bridge.cli.ingest import run_ingest
    from kb_bridge.client.engine import EngineClient

    configure_logging("WARNING", False, settings.secrets())
    client = EngineClient(settings.engine)
    try:
        return run_ingest(args, client, settings.uploads.extensions)
    finally:
        client.close()


def _tools(settings: Settings, as_json: bool) -> int:
    from kb_bridge.tools import registry as tools
    from kb_bridge.protocol.results import to_mcp_tool

    listed = [to_mcp_tool(spec).model_dump(by_alias=True, mode="json", exclude_none=True) for spec in tools.select(settings.mcp)]
    if as_json:
        print(json.dumps({"tools": listed}, indent=2))
        return 0
    total = len(json.dumps({"tools": listed}))
    for tool in listed:
        size = len(json.dumps(tool))
        hints = tool.get("annotations", {})
        kind = "read-only" if hints.get("readOnlyHint") else ("destructive" if hints.get("destructiveHint") else "writes")
        print(f"{tool['name']:<20} {size:>6} chars  ~{size // 4:>5} tokens  {kind}")
    print(f"{'tools/list total':<20} {total:>6} chars  ~{total // 4:>5} tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
