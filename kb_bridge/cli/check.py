"""`kb-bridge check`: validate the configuration, reach the engine, check its version and our
key, and check the upload staging; a readable report, non-zero exit on any problem (suitable
as a container start check)."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass

from kb_bridge import __version__
from kb_bridge.client.engine import EngineClient
from kb_bridge.environment import is_loopback_host, parse_bind
from kb_bridge.errors import EngineAuthFailed, KbError
from kb_bridge.settings import Settings
from kb_bridge.client.versions import engine_version, version_problem

PROBE_TIMEOUT = 5.0


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    warning: bool = False


def _is_loopback(bind: str) -> bool:
    try:
        host, _ = parse_bind(bind)
    except ValueError:  # a Settings built by hand, not read by load_settings
        return False
    return is_loopback_host(host)


def check_configuration(settings: Settings) -> list[Check]:
    mcp, server = settings.mcp, settings.server
    checks = [Check("configuration", True, f"kb-bridge {__version__}; engine {settings.engine.safe_url()}; bind {server.bind}; {server.workers} worker(s)")]
    if not mcp.auth_enabled and not _is_loopback(server.bind):
        checks.append(Check("auth", False, f"KB_MCP_API_KEY is not set but KB_BIND={server.bind} is reachable from other hosts"))
    elif not mcp.auth_enabled:
        checks.append(Check("auth", True, "KB_MCP_API_KEY is not set: fine on loopback, set one before exposing the bridge", warning=True))
    else:
        modes = [f"{len(mcp.api_keys)} agent key(s)", f"{len(mcp.named_tokens)} named token(s)"]
        if mcp.oauth.enabled:
            modes.append(f"OAuth issuer {mcp.oauth.issuer}")
        checks.append(Check("auth", True, ", ".join(modes) + " configured"))
    if mcp.oauth.enabled:
        checks.append(check_oauth_issuer(settings))
    return checks


def check_oauth_issuer(settings: Settings) -> Check:
    """The issuer's signing keys can be fetched (discovery included): else no OAuth token would be accepted."""
    from kb_bridge.auth.oauth import OAuthVerifier

    verifier = OAuthVerifier(settings.mcp.oauth)
    if verifier.prime():
        return Check("oauth", True, f"fetched the signing keys of {settings.mcp.oauth.issuer}")
    return Check("oauth", False, f"cannot fetch the signing keys of KB_OAUTH_ISSUER={settings.mcp.oauth.issuer} (see the log line above)")


def check_engine(settings: Settings) -> list[Check]:
    client = EngineClient(settings.engine)
    try:
        status = client.status(timeout=PROBE_TIMEOUT, retry=False)
    except EngineAuthFailed as exc:
        if settings.engine.api_key is None:
            return [Check("engine", False, f"{exc.code}: the engine at {settings.engine.safe_url()} requires an API key "
                                           "and KB_API_KEY is not set: set it to the engine's key")]
        return [Check("engine", False, f"{exc.code}: the engine rejected KB_API_KEY: it is not the engine's key")]
    except KbError as exc:
        return [Check("engine", False, f"{exc.code}: {exc.message}")]
    finally:
        client.close()
    version = engine_version(status)
    problem = version_problem(status)
    if problem is not None:
        return [Check("engine", False, problem)]
    model = status.get("model")
    modes = ", ".join(status.get("search_modes") or [])
    detail = f"version {version}, key accepted, model {model.get('name') if isinstance(model, dict) else 'none'}, search modes: {modes}"
    return [Check("engine", True, detail)]


def check_uploads(settings: Settings) -> list[Check]:
    uploads = settings.uploads
    if uploads.store_url is not None:
        try:
            import redis

            redis.Redis.from_url(uploads.store_url, socket_connect_timeout=PROBE_TIMEOUT).ping()
        except Exception as exc:  # noqa: BLE001 - any failure to reach the store is the finding
            return [Check("uploads", False, f"Redis upload store unreachable ({type(exc).__name__})")]
        return [Check("uploads", True, "Redis upload store reachable")]
    try:
        os.makedirs(uploads.dir, mode=0o700, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=uploads.dir, prefix=".check-"):
            pass
    except OSError as exc:
        return [Check("uploads", False, f"KB_UPLOAD_DIR {uploads.dir} is not writable ({exc.strerror})")]
    return [Check("uploads", True, f"staging directory {uploads.dir} is writable")]


def run_check(settings: Settings, as_json: bool = False) -> int:
    checks = check_configuration(settings) + check_engine(settings) + check_uploads(settings)
    ok = all(c.ok for c in checks)
    if as_json:
        print(json.dumps({"ok": ok, "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        for c in checks:
            mark = "WARN" if c.warning else ("ok" if c.ok else "FAIL")
            print(f"[{mark:>4}] {c.name}: {c.detail}")
        print("all checks passed" if ok else "problems found")
    return 0 if ok else 1
