"""The `kb-bridge` command: serve | stdio | engine | demo | check | ingest | migrate | token | tools, and for
people: search | add | get | delete (documents.py) | export | import (transfer.py) | backup.

Each subcommand names its function with argparse's `set_defaults(func=...)` (exits.add_command); exits.run
runs it and turns its errors into exit codes.

`engine_cli()` is the bridge's one way into the bundled engine: `engine` hands it its arguments, and
`migrate` and `backup` (commands of the bridge, with the bridge's output and exit codes) call the work it
offers on the engine's stores. No other bridge module imports the engine.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from kb_bridge import __version__
from kb_bridge.cli import exits
from kb_bridge.cli.exits import OK, add_command
from kb_bridge.digits import is_port
from kb_bridge.logs import configure_logging
from kb_bridge.settings import load_settings
from kb_bridge.uploads.factory import check_staging


def _parser() -> argparse.ArgumentParser:
    from kb_bridge.cli import backup, browsing, documents, ingest, migrate, transfer

    parser = argparse.ArgumentParser(
        prog="kb-bridge",
        description="An MCP server that gives AI agents a knowledge base (search, notes, files, memory).",
        epilog="Configuration comes from KB_* environment variables; see the README's configuration table.",
    )
    parser.add_argument("--version", action="version", version=f"kb-bridge {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = add_command(commands, "serve", _serve,
                        help="serve MCP over Streamable HTTP with gunicorn (same as gunicorn -c gunicorn.conf.py)")
    serve.add_argument("--bind", metavar="HOST:PORT", help="address to listen on (env KB_BIND, default 127.0.0.1:8765)")
    serve.add_argument("--workers", type=int, metavar="N", help="gunicorn worker processes (env KB_WORKERS, default 2)")

    add_command(commands, "stdio", _stdio,
                help="serve MCP over stdin/stdout (for Claude Desktop and other local clients)")

    # Never run from here: main() hands everything after `engine` to the engine's own parser.
    commands.add_parser("engine", help="run the bundled local kb engine (see `kb-bridge engine --help`)")

    demo = add_command(commands, "demo", _demo,
                       help="run the local engine and the bridge together, with a sample corpus")
    demo.add_argument("--data", metavar="DIR", help="engine data directory (default: a per-user data directory)")
    demo.add_argument("--port", type=_port, default=8765, help="bridge port on 127.0.0.1 (default 8765)")
    demo.add_argument("--engine-port", type=_port, default=8000, help="engine port on 127.0.0.1 (default 8000)")
    demo.add_argument("--no-sample", action="store_true", help="do not load the sample corpus")

    check = add_command(commands, "check", _check,
                        help="validate the configuration and reach the engine; exit non-zero on a problem")
    check.add_argument("--json", action="store_true", help="print the report as JSON")

    ingest.add_arguments(commands)
    migrate.add_arguments(commands)
    _add_token(commands)
    documents.add_arguments(commands)
    browsing.add_arguments(commands)
    transfer.add_arguments(commands)
    backup.add_arguments(commands)

    tools_cmd = add_command(commands, "tools", _tools,
                            help="list the tools this configuration offers, with their size in tools/list")
    tools_cmd.add_argument("--json", action="store_true", help="print the tools/list payload itself")
    return parser


def _port(text: str) -> int:
    """A TCP port, 1-65535, in ASCII digits (0 would be a port the demo could not print)."""
    if not is_port(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1-65535)")
    return int(text)


def _add_token(commands: Any) -> None:
    from kb_bridge.cli.tokens import new_token

    token = add_command(
        commands, "token", _print_token,
        help="print a new random token (for KB_MCP_API_KEY), or `token new NAME` for a named token",
        description="Without a subcommand: print a new random token for KB_MCP_API_KEY (full access).",
    )
    token_commands = token.add_subparsers(dest="token_command", metavar="SUBCOMMAND")
    new = add_command(
        token_commands, "new", new_token,
        help="make a named token with scopes (and collections) for KB_MCP_TOKENS_FILE",
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["engine"]:
            # Everything after `engine` belongs to the engine's own parser (argparse cannot pass
            # options through a subcommand untouched).
            from kb_bridge.cli.progress import Progress

            return int(engine_cli().main(argv[1:], display=Progress))
        parsed = _parser().parse_args(argv)
    except KeyboardInterrupt:
        # Ctrl-C while the command's modules load (a third of a second), before exits.run would say it.
        print("kb-bridge: interrupted", file=sys.stderr)
        return exits.INTERRUPTED
    return exits.run(parsed)


def engine_cli() -> ModuleType:
    """The engine's command-line module (local_engine/cli.py), imported only by a command that needs the engine."""
    from kb_bridge.local_engine import cli

    return cli


def _print_token(args: argparse.Namespace) -> int:
    print(secrets.token_urlsafe(32))
    return OK


def _serve(args: argparse.Namespace) -> int:
    # Flags become the environment variables the one settings reader reads.
    if args.bind is not None:
        os.environ["KB_BIND"] = args.bind
    if args.workers is not None:  # --workers 0 is refused by the settings, as KB_WORKERS=0 is; not the default
        os.environ["KB_WORKERS"] = str(args.workers)
    settings = load_settings()  # fail here, readably, rather than inside gunicorn's master
    check_staging(settings)
    from kb_bridge.serving.gunicorn import run_server

    # gunicorn runs in this process: it is the master (PID 1 in a container gets the signals).
    return run_server(settings)


def _stdio(args: argparse.Namespace) -> int:
    settings = load_settings()
    check_staging(settings)
    configure_logging(settings.server.log_level, settings.server.log_json, settings.secrets())
    from kb_bridge.protocol.stdio import StdoutClosed, run_stdio

    try:
        run_stdio(settings)
    except StdoutClosed as closed:
        # Nobody is left to read an answer: one line on stderr for whoever reads the client's logs.
        raise exits.Failed(closed.message) from None
    except KeyboardInterrupt:
        # A tool call's engine request runs on the bridge's pool, whose threads the interpreter joins at exit
        # (concurrent.futures): an engine that does not answer held Ctrl-C until the request's deadline
        # (KB_ENGINE_TIMEOUT). Every answer is written (the call under way got `Connection closed`, and the
        # bridge stopped without waiting for it: runtime.Bridge.lifespan), and its request was sent: nothing
        # is left to wait for.
        print("kb-bridge stdio: interrupted", file=sys.stderr, flush=True)
        logging.shutdown()
        os._exit(exits.INTERRUPTED)
    return OK


def _demo(args: argparse.Namespace) -> int:
    from kb_bridge.cli.demo import run_demo

    return run_demo(args)


def _check(args: argparse.Namespace) -> int:
    from kb_bridge.cli.check import run_check

    return run_check(load_settings(), as_json=args.json)


def _tools(args: argparse.Namespace) -> int:
    from kb_bridge.protocol.results import to_mcp_tool
    from kb_bridge.tools import registry as tools

    settings = load_settings()
    listed = [to_mcp_tool(spec).model_dump(by_alias=True, mode="json", exclude_none=True) for spec in tools.select(settings.mcp)]
    if args.json:
        print(json.dumps({"tools": listed}, indent=2))
        return OK
    total = len(json.dumps({"tools": listed}))
    for tool in listed:
        size = len(json.dumps(tool))
        hints = tool.get("annotations", {})
        kind = "read-only" if hints.get("readOnlyHint") else ("destructive" if hints.get("destructiveHint") else "writes")
        print(f"{tool['name']:<20} {size:>6} chars  ~{size // 4:>5} tokens  {kind}")
    print(f"{'tools/list total':<20} {total:>6} chars  ~{total // 4:>5} tokens")
    return OK


if __name__ == "__main__":
    raise SystemExit(main())
