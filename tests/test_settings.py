"""Settings: read once from the environment, validated, errors naming the variable."""

from __future__ import annotations

import re

import pytest

from kb_bridge.errors import SettingsError
from kb_bridge.credentials.secret import Secret
from kb_bridge.settings import load_settings

KEY = "agent-token-0123456789abcdef"


def test_defaults_are_safe() -> None:
    settings = load_settings({})
    assert settings.engine.url == "http://127.0.0.1:8000"
    assert settings.server.bind == "127.0.0.1:8765"
    assert settings.server.forwarded_allow_ips == ()  # no peer's X-Forwarded-For is believed
    assert not settings.mcp.auth_enabled
    assert settings.uploads.ttl_seconds == 600 and settings.uploads.max_bytes == 512 * 1024 * 1024


def test_every_documented_variable_is_read() -> None:
    settings = load_settings({
        "KB_ENGINE_URL": "http://engine:8000/", "KB_API_KEY": "secret", "KB_MCP_API_KEY": f"{KEY},{KEY}x",
        "KB_MCP_ALLOWED_HOSTS": "kb.example.com, 127.0.0.1:*", "KB_MCP_ALLOWED_ORIGINS": "https://app.example.com",
        "KB_UPLOAD_DIR": "/var/kb", "KB_ENGINE_TIMEOUT": "12.5", "KB_ENGINE_RETRIES": "5",
        "KB_THREAD_POOL_SIZE": "16", "KB_MCP_READ_ONLY": "yes", "KB_MCP_TOOLS": "kb_search,kb_get",
    })
    assert settings.engine.url == "http://engine:8000"
    assert settings.engine.api_key == Secret("secret")
    assert len(settings.mcp.api_keys) == 2
    assert settings.mcp.allowed_hosts == ("kb.example.com", "127.0.0.1:*")
    assert settings.mcp.allowed_origins == ("https://app.example.com",)
    assert settings.uploads.dir == "/var/kb"
    assert settings.engine.read_timeout == 12.5 and settings.engine.retry_attempts == 5
    assert settings.mcp.thread_pool_size == 16 and settings.mcp.read_only and settings.mcp.tools == ("kb_search", "kb_get")


@pytest.mark.parametrize(
    ("environ", "variable"),
    [
        ({"KB_ENGINE_URL": "ftp://x"}, "KB_ENGINE_URL"),
        ({"KB_ENGINE_URL": "http://x/?a=1"}, "KB_ENGINE_URL"),
        ({"KB_ENGINE_TIMEOUT": "soon"}, "KB_ENGINE_TIMEOUT"),
        ({"KB_ENGINE_RETRIES": "0"}, "KB_ENGINE_RETRIES"),
        ({"KB_THREAD_POOL_SIZE": "-1"}, "KB_THREAD_POOL_SIZE"),
        ({"KB_MCP_READ_ONLY": "perhaps"}, "KB_MCP_READ_ONLY"),
        ({"KB_MCP_API_KEY": "short"}, "KB_MCP_API_KEY"),
        ({"KB_MCP_TASK_KEY": "t" * 31}, "KB_MCP_TASK_KEY"),
        ({"KB_MCP_API_KEY": KEY, "KB_API_KEY": KEY}, "KB_MCP_API_KEY"),
        ({"KB_BIND": "nowhere"}, "KB_BIND"),
        ({"KB_LOG_LEVEL": "LOUD"}, "KB_LOG_LEVEL"),
        ({"KB_UPLOAD_MAX_CHUNK_BYTES": str(8 * 1024 * 1024)}, "KB_UPLOAD_MAX_CHUNK_BYTES"),
        ({"KB_UPLOAD_STORE": "memcached://x"}, "KB_UPLOAD_STORE"),
        ({"KB_FORWARDED_ALLOW_IPS": "proxy.example"}, "KB_FORWARDED_ALLOW_IPS"),
        ({"KB_FORWARDED_ALLOW_IPS": "10.0.0.1/24"}, "KB_FORWARDED_ALLOW_IPS"),
    ],
)
def test_bad_values_name_the_variable(environ: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(environ)
    assert caught.value.variable == variable
    assert str(caught.value).startswith(variable)


def test_secrets_never_show_in_repr() -> None:
    task_key = "task-key-" + "t" * 32
    settings = load_settings({"KB_API_KEY": "engine-secret", "KB_MCP_API_KEY": KEY, "KB_MCP_TASK_KEY": task_key})
    assert "engine-secret" not in repr(settings) and KEY not in repr(settings) and task_key not in repr(settings)
    assert task_key in settings.secrets()  # so the logs redact it
    assert KEY not in str(settings.mcp.api_keys)


def test_unknown_tool_in_allow_list_is_a_settings_error() -> None:
    from kb_bridge.tools import registry as tools

    with pytest.raises(SettingsError, match="kb_nope"):
        tools.select(load_settings({"KB_MCP_TOOLS": "kb_search,kb_nope"}).mcp)


def test_read_only_mode_registers_no_write_tools() -> None:
    from kb_bridge.tools import registry as tools

    selected = tools.select(load_settings({"KB_MCP_READ_ONLY": "true"}).mcp)
    assert selected and all(tool.read_only for tool in selected)
    assert "kb_addnote" not in {tool.name for tool in selected}


def test_38_gunicorn_worker_timeout_exceeds_the_engine_budget() -> None:
    """Checklist 38: a worker waiting on a slow engine through every retry is never killed."""
    import subprocess
    import sys

    env = {"KB_ENGINE_TIMEOUT": "100", "KB_ENGINE_RETRIES": "4", "KB_ENGINE_RETRY_MAX_WAIT": "5"}
    code = "from kb_bridge.serving.gunicorn import gunicorn_options; print(gunicorn_options()['timeout'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    budget = load_settings(env).engine.call_budget()
    assert budget == 1.5 * 100  # the per-call deadline: every attempt, retry and wait fits in it
    assert int(out) > budget


def test_every_variable_the_settings_read_is_documented_in_the_readme() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    read = set(re.findall(r'"(KB_[A-Z0-9_]+)"', (root / "kb_bridge" / "settings.py").read_text()))
    readme = (root / "README.md").read_text()
    undocumented = sorted(name for name in read if f"| `{name}` |" not in readme)
    assert len(read) > 20
    assert undocumented == []


# --- OAuth URLs: plain http only on loopback (environment.is_loopback_host, tests/test_environment.py) ---------------


@pytest.mark.parametrize("issuer", ["http://127.kb-issuer.invalid", "http://127.0.0.1.nip.io/realms/kb",
                                    "http://localhost.evil.example", "http://0.0.0.0:8080"])
def test_an_http_issuer_off_loopback_is_refused_naming_the_setting(issuer: str) -> None:
    for variable in ("KB_OAUTH_ISSUER", "KB_OAUTH_JWKS_URL"):
        environ = {"KB_OAUTH_ISSUER": "https://id.example", "KB_PUBLIC_URL": "https://kb.example", variable: issuer}
        with pytest.raises(SettingsError) as caught:
            load_settings(environ)
        assert caught.value.variable == variable and "https" in caught.value.problem


@pytest.mark.parametrize("issuer", ["http://127.0.0.1:9000", "http://127.1.2.3/realms/kb", "http://[::1]:9000",
                                    "http://LOCALHOST:9000/"])
def test_an_http_issuer_on_loopback_is_accepted(issuer: str) -> None:
    settings = load_settings({"KB_OAUTH_ISSUER": issuer, "KB_PUBLIC_URL": "https://kb.example"})
    assert settings.mcp.oauth.issuer == issuer


def test_an_engine_url_with_a_password_beside_kb_api_key_is_refused_without_quoting_it() -> None:
    """requests sent the URL's user:password as Basic auth in place of `Bearer KB_API_KEY`: the key never reached the
    engine, and its 401 was reported as "the engine rejected KB_API_KEY"."""
    url = "http://kb:url-pass-0123456789@127.0.0.1:8000"
    with pytest.raises(SettingsError) as caught:
        load_settings({"KB_ENGINE_URL": url, "KB_API_KEY": "engine-secret-0123456789"})
    assert caught.value.variable == "KB_ENGINE_URL" and "url-pass" not in str(caught.value)
    assert load_settings({"KB_ENGINE_URL": url}).engine.safe_url() == "http://127.0.0.1:8000"  # a proxy's own login
