"""`kb-bridge engine` / `python -m kb_bridge.local_engine`: run the local kb engine; and the engine's part of
`kb-bridge migrate` and `kb-bridge backup`.

This module is the bridge's one way into local_engine/: kb_bridge/cli/__init__.py imports it, and nothing
else, when a command needs the engine. `kb-bridge engine` is `main`. migrate and backup are the bridge's
commands (cli/migrate.py, cli/backup.py: their options, output, progress display and exit codes), and their
work on the engine's stores is here: `plan_migration` / `run_migration` (migration.py) and `backup_source` /
`back_up` (backup.py). They raise ConfigError when what the user gave cannot be used (exit 2) and any other
EngineError when the work fails (exit 1); both are offered here for the bridge to catch.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kb_bridge.logs import configure_logging

from .config import EngineConfig, load_config
from .datadir import lock_data_dir, require_writable
from .embedding.device import DEVICE_CHOICES, select_device
from .errors import ConfigError as ConfigError  # offered to the bridge: see above
from .errors import EngineError, StoreUnavailable
from .progress import Progress, ProgressDisplay, plain_lines

if TYPE_CHECKING:
    from .migration import Migration, Skip

logger = logging.getLogger(__name__)

DESCRIPTION = """\
Run the local kb engine: the knowledge-base HTTP API (engine-api v1) that kb-bridge talks to.
Documents, chunks, tags, jobs and vectors live in one SQLite database under --data.
Search is BM25 full text, all-MiniLM-L6-v2 vectors (with the 'engine' extra), or both fused.
"""

EPILOG = """\
environment:
  KB_API_KEY                  require this key on /api/v1/* (Authorization: Bearer KEY or X-API-Key: KEY)
  KB_ENGINE_DATA              data directory (same as --data)
  KB_ENGINE_BIND              HOST:PORT (same as --bind)
  KB_ENGINE_DATABASE_URL      postgresql://user:password@host/db: data in PostgreSQL + pgvector, shared by
                              any number of engine replicas (same as --database-url; default SQLite in --data);
                              percent-encode @ / : % and spaces in the password (@ as %40, ...)
  KB_ENGINE_EMBEDDER          auto (default) | minilm | none (full-text search only)
  KB_ENGINE_WAIT_FOR_MODEL    1: load the model before serving instead of in the background
  KB_ENGINE_DEVICE            auto (default: CUDA, then MPS, then CPU) | cpu | cuda | mps (same as --device)
  KB_ENGINE_EMBED_BATCH       chunks per model call while ingesting (default 16)
  KB_ENGINE_EMBED_WORKERS     copies of the model embedding documents side by side (default 0: one per core, up to 4)
  KB_ENGINE_MAX_UPLOAD_BYTES  largest accepted upload (default 629145600 = 600 MiB)
  KB_ENGINE_THREADS           request threads (default 8)
  KB_LOG_JSON                 1 (default): one JSON object per log line on stderr, as kb-bridge logs; 0: plain text
  more in docs/engine.md (number formats, chunking, fusion and BM25 parameters).

Without KB_API_KEY the engine refuses to bind a non-loopback address unless --allow-no-auth is given.
SIGTERM stops gracefully, SIGINT fast; an interrupted ingestion job runs again at the next start.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kb-bridge engine", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data", metavar="DIR",
                        help="data directory (default: $XDG_DATA_HOME/kb-bridge/engine or ~/.local/share/kb-bridge/engine)")
    parser.add_argument("--bind", metavar="HOST:PORT", help="address to listen on (default: 127.0.0.1:8000)")
    parser.add_argument("--database-url", metavar="URL",
                        help="keep the data in PostgreSQL with pgvector (postgresql://user:password@host/db; "
                             "env KB_ENGINE_DATABASE_URL, which keeps the password out of ps) instead of SQLite in "
                             "--data; several engines may share it")
    parser.add_argument("--threads", type=int, metavar="N", help="request threads (default: 8)")
    parser.add_argument("--no-embeddings", action="store_true",
                        help="full-text search only, even when the embedding model is installed")
    parser.add_argument("--wait-for-model", action="store_true",
                        help="load the embedding model before serving (default: in the background; "
                             "full-text search works meanwhile)")
    parser.add_argument("--device", choices=DEVICE_CHOICES,
                        help="where the embedding model runs (default: auto = CUDA, then MPS, then CPU); "
                             "a device named here that the machine lacks stops the engine")
    parser.add_argument("--reembed", action="store_true",
                        help="re-embed every stored chunk with the model in this engine's number format, then "
                             "exit instead of serving (the engine asks for it at start when stored vectors were "
                             "made in a format too far from its own); an interrupted run continues where it stopped")
    parser.add_argument("--parse-timeout", type=float, metavar="SECONDS",
                        help="seconds reading one uploaded file into text may take before its job fails "
                             "(env KB_ENGINE_PARSE_TIMEOUT; default: 120)")
    parser.add_argument("--parse-memory", type=int, metavar="MIB",
                        help="memory reading one uploaded file may use, in MiB, before its job fails "
                             "(env KB_ENGINE_PARSE_MEMORY; default: 1024)")
    parser.add_argument("--allow-no-auth", action="store_true",
                        help="allow a non-loopback --bind without KB_API_KEY (trusted networks only)")
    parser.add_argument("--access-log", action="store_true", help="log every request to stderr")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"),
                        help="log level (default: info)")
    return parser


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    overrides: dict[str, object] = {"data_dir": args.data, "threads": args.threads, "device": args.device,
                                    "database_url": args.database_url, "bind": args.bind,
                                    "parse_timeout": args.parse_timeout, "parse_memory": args.parse_memory}
    if args.no_embeddings:
        overrides["embedder"] = "none"
    for flag in ("wait_for_model", "allow_no_auth", "access_log"):
        if getattr(args, flag):
            overrides[flag] = True
    return load_config(os.environ, overrides)


def main(argv: list[str] | None = None, display: ProgressDisplay | None = None) -> int:
    """`display` makes the progress display `--reembed` reports to: the bridge's (cli/__init__.py passes
    it); plain lines on stderr when the engine runs on its own (`python -m kb_bridge.local_engine`)."""
    args = build_parser().parse_args(argv)
    # numpy's BLAS must be single-threaded here, set before numpy loads (it loads later, with the model).
    # Vector search is one memory-bound matrix-vector product per query: a second BLAS thread gains little,
    # and its pool spinning against torch's, which has just embedded the query, made searches 2-10x
    # slower on 2 cores (bench/engine_bench.py).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # torch's OpenMP threads (libgomp, which reads this when torch loads) sleep between parallel regions
    # instead of spinning. Spinning is the raw model's best alone on the cores, but here the upload, store
    # and search threads need those cores between the model's operations: with spinning the engine
    # ingested at 0.78 of the raw model's rate, without it at 0.85 (docs/benchmarks.md, "Where the CPU goes").
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # Everything the engine writes holds notes or their text (the database, staged uploads, indexes): its own
    # user's alone, whatever umask it was started under (0022 made them world-readable). datadir.py keeps the
    # directory itself private too, for files an older engine left.
    os.umask(0o077)
    try:
        config = config_from_args(args)
        configure_logging(args.log_level.upper(), config.log_json, [config.api_key] if config.api_key else [])
        config.check_bind_is_safe()
        if config.embedder != "none" and config.device not in ("auto", "cpu"):
            select_device(config.device)  # a missing GPU stops the engine here, not in a worker
        # Fail here, in the foreground, rather than in a worker that gunicorn would retry.
        lock_data_dir(config.data_dir).close()
        if config.database_url:
            from .store.postgres import prepare_database

            prepare_database(config.database_url)  # reachable, pgvector, schema not newer: or exit here
        else:
            from .store.sqlite.schema import refuse_newer

            refuse_newer(config.database_path)  # a rolled-back kb-bridge: one line here, not a worker's traceback
            require_writable(config.database_path)
    except StoreUnavailable as exc:
        print(f"kb-bridge engine: {exc.message}", file=sys.stderr)
        return 1
    except EngineError as exc:
        print(f"kb-bridge engine: {exc.message}", file=sys.stderr)
        return 2
    if args.reembed:
        return _reembed(config, display or plain_lines)
    if not config.api_key:
        logger.warning("KB_API_KEY is not set: the engine API is open to anyone who can reach %s", config.bind)
    from .server import serve  # gunicorn is only needed to serve, not for --help

    return serve(config, args.log_level)


def plan_migration(from_sqlite: Path, to: str | None) -> Migration:
    """`kb-bridge migrate`'s checks of --from-sqlite and --to (else KB_ENGINE_DATABASE_URL), before PostgreSQL is
    touched (migration.py)."""
    from . import migration

    url, setting = migration.target(to, os.environ)
    return migration.plan(from_sqlite, url, setting)


def run_migration(plan: Migration, progress: Progress, skipped: Skip) -> dict[str, Any]:
    """`kb-bridge migrate`'s copy; its report (migration.py)."""
    from . import migration

    return migration.run(plan, progress, skipped)


def backup_source(data: Path | None) -> Path:
    """The SQLite database `kb-bridge backup --data DATA` copies: --data, else KB_ENGINE_DATA, else the
    engine's default directory (backup.py)."""
    from . import backup

    return backup.database_in(os.environ, data)


def back_up(source: Path, target: Path, progress: Progress) -> dict[str, Any]:
    """`kb-bridge backup`'s copy of `source` into `target`; its summary (backup.py)."""
    from . import backup

    return backup.back_up(source, target, progress)


def _reembed(config: EngineConfig, display: ProgressDisplay) -> int:
    from .reembed import reembed

    try:
        with display() as progress:
            reembed(config, progress)
    except EngineError as exc:
        print(f"kb-bridge engine: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kb-bridge engine: re-embedding interrupted; run `kb-bridge engine --reembed` again to continue",
              file=sys.stderr)
        return 130
    return 0
