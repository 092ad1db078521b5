"""The reader both programs read their variables with (kb_bridge/environment.py): an empty or blank variable is
unset, values are stripped, errors name the variable; one test of loopback; one HOST:PORT parser."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kb_bridge.environment import Env, is_loopback_host, parse_bind
from kb_bridge.errors import SettingsError
from kb_bridge.local_engine.config import load_config
from kb_bridge.local_engine.errors import ConfigError
from kb_bridge.settings import load_settings


@pytest.mark.parametrize("value", ["", " ", "\t \n"])
def test_an_empty_or_blank_variable_is_unset(value: str) -> None:
    env = Env({"N": value})
    assert env.raw("N") is None
    assert env.integer("N", 7) == 7 and env.number("N", 0.5) == 0.5 and env.flag("N", True) is True
    assert env.text("N", "d") == "d" and env.items("N", ("a",)) == ("a",) and env.path("N") is None


def test_values_are_stripped() -> None:
    env = Env({"N": " 12 ", "F": " off ", "L": " a , ,b ", "T": "  text "})
    assert env.integer("N", 0) == 12 and env.flag("F", True) is False
    assert env.items("L", ()) == ("a", "b") and env.text("T", "") == "text"


@pytest.mark.parametrize(("value", "reader", "problem"), [
    ("many", lambda env: env.integer("N", 1), "expected an integer, got 'many'"),
    ("0", lambda env: env.integer("N", 1, low=1, high=9), "must be between 1 and 9, got 0"),
    ("-1", lambda env: env.integer("N", 1, low=0), "must be at least 0, got -1"),
    ("nan", lambda env: env.number("N", 1.0), "expected a number, got 'nan'"),
    ("maybe", lambda env: env.flag("N", False), "expected 1/0, true/false, yes/no or on/off, got 'maybe'"),
])
def test_a_bad_value_is_a_settings_error_naming_the_variable(value: str, reader: Callable[[Env], object],
                                                             problem: str) -> None:
    with pytest.raises(SettingsError) as caught:
        reader(Env({"N": value}))
    assert (caught.value.variable, caught.value.problem) == ("N", problem)


# --- both programs read alike --------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [("", True), ("  ", True), ("0", False), (" off ", False), ("YES", True)])
def test_kb_log_json_reads_the_same_in_the_bridge_and_the_engine(tmp_path: Path, value: str, expected: bool) -> None:
    """KB_LOG_JSON governs both programs; empty or blank is unset (true) in both. The engine read a blank
    value as false before it read with the bridge's reader."""
    assert load_settings({"KB_LOG_JSON": value}).server.log_json is expected
    assert load_config({"KB_ENGINE_DATA": str(tmp_path), "KB_LOG_JSON": value}).log_json is expected


def test_the_engine_takes_a_blank_variable_as_unset(tmp_path: Path) -> None:
    blank = {name: "  " for name in ("KB_ENGINE_THREADS", "KB_ENGINE_EMBEDDER", "KB_ENGINE_BIND", "KB_API_KEY",
                                     "KB_ENGINE_FTS_WEIGHT", "KB_ENGINE_WAIT_FOR_MODEL", "KB_ENGINE_DATABASE_URL")}
    config = load_config({"KB_ENGINE_DATA": str(tmp_path), **blank})
    assert (config.threads, config.embedder, config.host, config.port) == (8, "auto", "127.0.0.1", 8000)
    assert config.api_key is None and config.fts_weight == 1.0 and not config.wait_for_model
    assert config.database_url is None
    assert load_config({"KB_ENGINE_DATA": " ", "XDG_DATA_HOME": str(tmp_path)}).data_dir == tmp_path / "kb-bridge" / "engine"
    assert load_config({"KB_ENGINE_DATA": str(tmp_path), "KB_API_KEY": " key "}).api_key == "key"  # as the bridge sends it


@pytest.mark.parametrize(("env", "overrides", "named"), [
    ({"KB_ENGINE_THREADS": "300"}, {}, "KB_ENGINE_THREADS: must be between 1 and 256, got 300"),
    ({"KB_ENGINE_BIND": "8000"}, {}, "KB_ENGINE_BIND: expected HOST:PORT"),
    ({}, {"bind": "localhost"}, "--bind: expected HOST:PORT"),
])
def test_the_engine_translates_the_readers_error_naming_the_variable_or_option(
        tmp_path: Path, env: dict[str, str], overrides: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({"KB_ENGINE_DATA": str(tmp_path), **env}, overrides)
    assert caught.value.message.startswith(named)


# --- HOST:PORT ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "parts"), [
    ("127.0.0.1:8765", ("127.0.0.1", 8765)), ("0.0.0.0:0", ("0.0.0.0", 0)), ("[::1]:8000", ("::1", 8000)),
    ("::1:8000", ("::1", 8000)), ("engine:65535", ("engine", 65535)),
])
def test_a_bind_is_host_and_port(value: str, parts: tuple[str, int]) -> None:
    assert parse_bind(value) == parts


@pytest.mark.parametrize("value", ["8000", ":8000", "host:", "host:port", "host:65536", "host:-1", "host:+80",
                                   "[::1:8000", "a]:80", "[]:80", "host:٣"])
def test_anything_else_is_not_a_bind(value: str) -> None:
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        parse_bind(value)


def test_both_programs_refuse_the_same_binds(tmp_path: Path) -> None:
    for value in ("host:65536", "nowhere", "[::1:80"):
        with pytest.raises(SettingsError, match="KB_BIND"):
            load_settings({"KB_BIND": value})
        with pytest.raises(ConfigError, match="KB_ENGINE_BIND"):
            load_config({"KB_ENGINE_DATA": str(tmp_path), "KB_ENGINE_BIND": value})


# --- loopback: where the bridge tolerates plain http (issue 32, item 15), where the engine serves without a key --


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "127.255.255.254", "::1", "[::1]", "localhost", "LOCALHOST",
                                  "LocalHost", "0:0:0:0:0:0:0:1"])
def test_loopback_is_127_slash_8_the_ipv6_loopback_or_localhost(host: str) -> None:
    assert is_loopback_host(host)


@pytest.mark.parametrize("host", ["127.kb-issuer.invalid", "127.0.0.1.nip.io", "localhost.evil.example", "evil-localhost",
                                  "0.0.0.0", "10.0.0.1", "::", "::ffff:127.0.0.1", "128.0.0.1", "", None, "127.1",
                                  "[127.0.0.1]", "::1]", "[::1", "localhost.", " 127.0.0.1"])
def test_nothing_else_is_loopback(host: str | None) -> None:
    assert not is_loopback_host(host)


def test_the_engine_needs_a_key_off_loopback_by_the_same_rule(tmp_path: Path) -> None:
    for host in ("LOCALHOST", "127.0.0.2", "::1"):
        load_config({"KB_ENGINE_DATA": str(tmp_path)}, {"host": host}).check_bind_is_safe()
    for host in ("0.0.0.0", "::ffff:127.0.0.1", "localhost.example.com"):
        with pytest.raises(ConfigError, match="KB_API_KEY"):
            load_config({"KB_ENGINE_DATA": str(tmp_path)}, {"host": host}).check_bind_is_safe()
