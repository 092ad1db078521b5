"""The PostgreSQL URL's password stays secret on every path: `kb-bridge engine` and `kb-bridge migrate` run as
a user runs them, with passwords holding the characters URLs treat specially (`%`, a space, `/`, `@`, `:`),
raw or percent-encoded. A URL that cannot be read is one line naming the setting; one that is read but whose
server is away (or answers) is reported without its password; never a traceback."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

import flask
import pytest

from kb_bridge.local_engine.app import engine_of
from kb_bridge.local_engine.config import load_config
from kb_bridge.local_engine.database_url import redacted
from kb_bridge.local_engine.errors import ConfigError
from kb_bridge.testing.postgres import PostgresServer
from kb_bridge.testing.processes import clean_env, free_port

# Every password starts with S3cr and ends with Tz9w: neither half may show anywhere.
PIECES = ("S3cr", "Tz9w")
UNREADABLE = ["S3cr%Tz9w", "S3cr%zzTz9w", "S3cr Tz9w", "S3cr/Tz9w", "S3cr@Tz9w", "S3cr%00Tz9w", "S3cr\tTz9w%"]
READABLE = ["S3cr:Tz9w", "S3cr%40x%2Fy%3Az%25w%20Tz9w", "S3cr?x#Tz9w"]
CONNECT_FOR_SECONDS = 30  # store/postgres: how long a start keeps trying an unreachable database


def url_with(password: str, port: int = 0) -> str:
    return f"postgresql://kb:{password}@127.0.0.1:{port or free_port()}/kb"


def assert_hidden(password: str, output: str) -> None:
    for secret in {password, unquote(password), *PIECES}:
        assert secret not in output, f"{secret!r} leaked:\n{output}"
    assert "Traceback" not in output, output


def engine_argv(tmp_path: Path, url: str | None) -> list[str]:
    argv = [sys.executable, "-m", "kb_bridge", "engine", "--data", str(tmp_path / "data"),
            "--bind", f"127.0.0.1:{free_port()}", "--no-embeddings"]
    return argv + (["--database-url", url] if url else [])


def migrate_argv(source: Path, url: str) -> list[str]:
    return [sys.executable, "-m", "kb_bridge", "migrate", "--from-sqlite", str(source), "--to", url]


@pytest.fixture
def sqlite_store(make_app: Callable[..., flask.Flask], tmp_path: Path) -> Path:
    """An empty SQLite store, as `kb-bridge engine` leaves it."""
    data = tmp_path / "sqlite-data"
    engine_of(make_app(data_dir=data, database_url=None)).close()
    return data


@pytest.mark.parametrize("password", UNREADABLE)
def test_an_unreadable_url_is_one_line_naming_the_setting(tmp_path: Path, sqlite_store: Path, password: str) -> None:
    url = url_with(password)
    runs = {
        "KB_ENGINE_DATABASE_URL": (engine_argv(tmp_path, None), {"KB_ENGINE_DATABASE_URL": url}),
        "--database-url": (engine_argv(tmp_path, url), {}),
        "--to": (migrate_argv(sqlite_store, url), {}),
    }
    for setting, (argv, env) in runs.items():
        done = subprocess.run(argv, env=clean_env(env), capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (setting, done.stderr)
        assert_hidden(password, done.stdout + done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and setting in lines[0] and "percent-encode" in lines[0], (setting, done.stderr)
    assert not (tmp_path / "data" / "engine.sqlite3").exists()  # never a fall back to SQLite


def test_a_url_the_driver_refuses_is_one_line_without_the_password(tmp_path: Path) -> None:
    """The last line of defence: a URL the check lets through but libpq refuses (an unknown option)."""
    password = READABLE[1]
    url = f"{url_with(password)}?S3cr_option=Tz9w"
    done = subprocess.run(engine_argv(tmp_path, url), env=clean_env({}), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert_hidden(password, done.stdout + done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1 and "cannot be read" in done.stderr


def test_an_unreachable_database_is_reported_without_the_password(tmp_path: Path, sqlite_store: Path) -> None:
    """URLs libpq reads, to a port where nothing listens: each command tries for its 30 s, all side by side."""
    runs = []
    for password in READABLE:
        url = url_with(password)
        for argv, env in ((engine_argv(tmp_path / password.replace("/", "_"), None), {"KB_ENGINE_DATABASE_URL": url}),
                          (migrate_argv(sqlite_store, url), {})):
            process = subprocess.Popen(argv, env=clean_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            runs.append((password, process))
    for password, process in runs:
        out, err = process.communicate(timeout=CONNECT_FOR_SECONDS * 4)
        assert process.returncode == 1, err
        assert "PostgreSQL is unavailable" in err and "kb:***@127.0.0.1" in err, err
        assert_hidden(password, out + err)


def test_a_migration_report_names_the_target_without_its_password(sqlite_store: Path,
                                                                 postgres_server: PostgresServer) -> None:
    # The test server trusts local connections: the password is there only to be kept out of the output.
    password = READABLE[1]
    url = postgres_server.new_database().replace("postgresql://postgres@", f"postgresql://postgres:{password}@")
    for extra in ([], ["--json"]):
        done = subprocess.run(migrate_argv(sqlite_store, url) + extra, env=clean_env({}), capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "postgres:***@" in done.stdout
        assert_hidden(password, done.stdout + done.stderr)


@pytest.mark.parametrize("password", UNREADABLE + READABLE)
def test_redacted_hides_every_password(password: str) -> None:
    for url in (url_with(password, 5432), f"postgres://kb:{password}@db.example/kb?sslmode=require",
                f"postgresql://kb:{password}@h1:5432,h2:5433/kb", f"postgresql://kb:{password}@[::1]:5432/kb"):
        shown = redacted(url)
        assert shown.startswith(url.split("://")[0] + "://kb:***@"), shown
        assert not any(piece in shown for piece in PIECES), shown
    assert redacted(f"postgresql://kb@/kb?host=%2Ftmp&password={password}&sslmode=require") == \
        "postgresql://kb@/kb?host=%2Ftmp&password=***&sslmode=require"


def test_redacted_keeps_what_is_not_a_password() -> None:
    assert redacted("postgresql://kb@db.example:5432/kb") == "postgresql://kb@db.example:5432/kb"
    assert redacted("postgresql://postgres@/kb_1?host=%2Ftmp%2Fpg") == "postgresql://postgres@/kb_1?host=%2Ftmp%2Fpg"
    assert redacted("postgresql://kb:pw@db.example:5432/kb") == "postgresql://kb:***@db.example:5432/kb"
    assert redacted("postgresql://kb:@db/kb") == "postgresql://kb:***@db/kb"


@pytest.mark.parametrize("password", UNREADABLE)
def test_load_config_refuses_an_unreadable_url_without_quoting_it(password: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config({"KB_ENGINE_DATABASE_URL": url_with(password, 5432)})
    assert refused.value.message.startswith("KB_ENGINE_DATABASE_URL")
    assert_hidden(password, refused.value.message)


@pytest.mark.parametrize("url", ["postgresql://kb:pw@h1:5432,h2:5433/kb?sslmode=require",
                                 "postgresql://kb:pw@[::1]:5432/kb", "postgresql://postgres@/kb?host=%2Ftmp%2Fpg",
                                 "postgres://kb@db.example/kb", "postgresql:///kb", url_with(READABLE[1], 5432)])
def test_load_config_takes_urls_libpq_reads(url: str) -> None:
    assert load_config({"KB_ENGINE_DATABASE_URL": url}).database_url == url


def test_the_configs_repr_holds_neither_the_url_nor_the_key() -> None:
    config = load_config({"KB_ENGINE_DATABASE_URL": url_with(READABLE[0], 5432), "KB_API_KEY": "S3cr-engine-key-Tz9w"})
    assert not any(piece in repr(config) for piece in PIECES)
