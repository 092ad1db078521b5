"""The one reader of the environment: every setting kb-bridge uses, validated at load.

`load_settings(environ)` is the only place that looks at environment variables. Everything
else receives a `Settings` object; tests build one directly with `Settings(...)` or
`load_settings({...})`. A bad value raises `SettingsError` naming the variable. Values are read with
environment.py's `Env`, the reader the engine's configuration uses too (an empty variable is unset).
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from kb_bridge.credentials.named_tokens import NamedToken, load_tokens_file
from kb_bridge.credentials.secret import Secret
from kb_bridge.environment import Env, is_loopback_host, parse_bind, parse_list
from kb_bridge.errors import SettingsError

MIB = 1024 * 1024

# Hosts and origins a loopback-bound bridge accepts by default (DNS-rebinding guard).
LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", "[::1]")
LOOPBACK_ORIGINS = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True)
class EngineSettings:
    """How the bridge reaches the kb engine."""

    url: str = "http://127.0.0.1:8000"
    api_key: Secret | None = None
    connect_timeout: float = 3.0
    # The longest one attempt may take in all: connect, send and the whole answer, however slowly it comes.
    read_timeout: float = 30.0
    # Streaming a large file to the engine takes longer than any JSON call.
    upload_timeout: float = 600.0
    # Total attempts per call (1 = no retries), backoff base and cap, and the cap on a
    # Retry-After the engine asks for. Their product bounds the time one call can take.
    retry_attempts: int = 3
    retry_backoff: float = 0.25
    retry_max_wait: float = 2.0
    # Response bodies above this are refused rather than read into memory.
    max_response_bytes: int = 64 * MIB
    # At least KB_THREAD_POOL_SIZE: a call that finds no free pooled connection opens (and drops) its own.
    pool_size: int = 64

    def safe_url(self) -> str:
        """The engine URL without any user:password part, fit for logs and reports."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{host}:{parts.port}" if parts.port else host
        return f"{parts.scheme}://{netloc}{parts.path}"

    def call_deadline(self) -> float:
        """Seconds a tool call's engine work may take in all, retries and waits included (client/deadline.py):
        room for one attempt of `read_timeout` and a retry of half as long."""
        return 1.5 * self.read_timeout

    def call_budget(self) -> float:
        """Worst-case seconds one JSON tool call's engine work may take (the per-call deadline bounds it).
        An upload's streaming has its own budget; it runs on a pool thread while the worker's event loop
        keeps answering gunicorn's heartbeat, so gunicorn's timeout does not cut it."""
        return self.call_deadline()


@dataclass(frozen=True)
class OAuthSettings:
    """The bridge as an OAuth 2.1 resource server (auth/oauth.py): on when `issuer` is set."""

    issuer: str | None = None
    # The bridge's public base URL (KB_PUBLIC_URL): the resource is public_url + "/mcp".
    public_url: str | None = None
    audience: str | None = None
    jwks_url: str | None = None

    @property
    def enabled(self) -> bool:
        return self.issuer is not None

    @property
    def resource(self) -> str:
        """The resource identifier clients ask tokens for (RFC 8707), and the metadata's `resource`."""
        return f"{self.public_url}/mcp"

    @property
    def expected_audience(self) -> str:
        return self.audience or self.resource

    @property
    def metadata_url(self) -> str:
        """Where the protected-resource metadata is (RFC 9728 section 3.1: the well-known path before /mcp)."""
        return f"{self.public_url}/.well-known/oauth-protected-resource/mcp"


@dataclass(frozen=True)
class McpSettings:
    """The MCP endpoint: auth, transport security, tool surface and concurrency."""

    api_keys: tuple[Secret, ...] = ()
    # KB_MCP_TOKENS_FILE: named tokens with scopes and collections (credentials/named_tokens.py), read at load.
    named_tokens: tuple[NamedToken, ...] = ()
    oauth: OAuthSettings = field(default_factory=OAuthSettings)
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    allowed_origins: tuple[str, ...] = LOOPBACK_ORIGINS
    # How /mcp answers: "auto" (JSON, or an SSE stream when the request carries a progress token
    # and so can receive notifications), "json" (always JSON: no progress) or "sse" (always SSE).
    # An SSE answer costs about 40 % more server time than a JSON one, so "auto" pays it only
    # when it buys something.
    response_mode: str = "auto"
    max_body_bytes: int = 4 * MIB
    thread_pool_size: int = 64
    tools: tuple[str, ...] | None = None
    read_only: bool = False
    # kb_addnote {wait: true} waits at most this long for the note to be indexed.
    wait_seconds: float = 30.0
    metrics: bool = True
    # The SDK's OpenTelemetry middleware: a span per MCP message. Off unless wanted: with no
    # exporter configured it only costs time on every call.
    otel: bool = False
    # Bearer token for /metrics; when unset, the MCP keys open it too (and nothing does without auth).
    metrics_token: Secret | None = None
    # KB_MCP_TASK_KEY: a secret that seals task ids (tools/task_ids.py), for replicas that share no other one.
    task_key: Secret | None = None

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys or self.named_tokens or self.oauth.enabled)


@dataclass(frozen=True)
class UploadSettings:
    """Chunked-upload staging."""

    dir: str = field(default_factory=lambda: os.path.join(tempfile.gettempdir(), "kb-bridge-uploads"))
    store_url: str | None = None
    ttl_seconds: float = 600.0
    max_bytes: int = 512 * MIB
    # Decoded bytes per chunk; base64 grows it by 4/3, which must fit the MCP body limit.
    max_chunk_bytes: int = 2 * MIB
    # File types the engine indexes; checked at start so nobody uploads 500 MB for a 415.
    extensions: tuple[str, ...] = ("txt", "md", "pdf", "html", "docx")
    max_uploads_per_caller: int = 8
    max_staged_bytes_per_caller: int = 1024 * MIB
    sweep_interval: float = 60.0


@dataclass(frozen=True)
class ServerSettings:
    """The HTTP server process (gunicorn)."""

    bind: str = "127.0.0.1:8765"
    workers: int = 2
    log_level: str = "INFO"
    log_json: bool = True
    graceful_timeout: float = 30.0
    # "uvicorn" (uvicorn's worker under gunicorn: httptools + uvloop) or "asgi" (gunicorn's own).
    worker_class: str = "uvicorn"
    # Idle keep-alive connections hold a worker's graceful shutdown open (gunicorn waits for
    # every connection), so keep this short unless a load balancer in front needs it longer.
    keepalive: int = 5
    # Open connections per worker (each costs some 35 KiB, docs/benchmarks.md "Abuse"). Beyond it the
    # oldest connection without a request in progress is closed for the new one; only when every one is
    # busy are new requests answered 503 (serving/protocol.py).
    max_connections: int = 1000
    # A request's head must arrive within header_timeout seconds, its body within body_timeout of the
    # head; else 408 and the connection is closed (slow clients cannot hold a worker's connections).
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    # Peers whose X-Forwarded-For and X-Forwarded-Proto are believed (a reverse proxy's addresses or networks).
    # None by default: gunicorn's own default trusts loopback, and on the default loopback bind every client is
    # loopback, so any client could write the address logged for it (a refused token logged as someone else's).
    forwarded_allow_ips: tuple[str, ...] = ()


@dataclass(frozen=True)
class Settings:
    engine: EngineSettings = field(default_factory=EngineSettings)
    mcp: McpSettings = field(default_factory=McpSettings)
    uploads: UploadSettings = field(default_factory=UploadSettings)
    server: ServerSettings = field(default_factory=ServerSettings)

    def __post_init__(self) -> None:
        _check_cross_field_rules(self)

    def longest_tool_call(self) -> float:
        """The most seconds one tool call's engine work may take by the bridge's own deadlines: kb_upload_finish
        {wait: true} streams the file within 1.5 x upload_timeout (client/engine.py), then waits for its job within
        wait_seconds and a call's deadline (tools/waiting.py); every other call is bounded by less. The end of stdin
        waits at most this long for the answers still owed (protocol/stdio_transport.py)."""
        return 1.5 * self.engine.upload_timeout + self.mcp.wait_seconds + self.engine.call_deadline()

    def secrets(self) -> list[str]:
        """Every secret this configuration holds, for redaction (kb_bridge/redaction.py)."""
        keys = [self.engine.api_key, self.mcp.metrics_token, self.mcp.task_key, *self.mcp.api_keys]
        return [key.reveal() for key in keys if key is not None]

    def shared_secrets(self) -> list[str]:
        """What every host of one deployment holds and no caller knows: the secrets, and, only when none of
        them is one that no MCP caller presents (the engine key, the metrics token, the task key), the digests
        of the tokens file's tokens. Task ids are sealed with them (tools/task_ids.py). The digests change
        whenever a token is added or removed, and a SIGHUP makes gunicorn's new workers read the file again: a
        key that digested them made every task made before the reload unknown. One secret no caller knows is
        enough, so the file's tokens count only when no such secret is set."""
        unknown_to_callers = (self.engine.api_key, self.mcp.metrics_token, self.mcp.task_key)
        if any(secret is not None for secret in unknown_to_callers):
            return self.secrets()
        return [*self.secrets(), *(token.sha256.hex() for token in self.mcp.named_tokens)]

    @property
    def shares_no_secret(self) -> bool:
        """Callers of different reach (auth on) and no secret every host holds: OAuth alone in front of a keyless
        engine. Task ids are then sealed with a key the server makes (tools/task_ids.py, serving/gunicorn.py)."""
        return self.mcp.auth_enabled and not self.shared_secrets()


# --- parsing helpers ----------------------------------------------------------------------


class _Env(Env):
    """The shared reader (environment.py), with the bridge's secrets."""

    def secret(self, name: str) -> Secret | None:
        value = self.raw(name)
        return Secret(value) if value is not None else None


def _parse_engine_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http:// or https:// URL with a host")
    if parts.query or parts.fragment:
        raise ValueError("must not carry a query string or fragment")
    return value.rstrip("/")


def _parse_response_mode(value: str) -> str:
    mode = value.lower()
    if mode not in ("auto", "json", "sse"):
        raise ValueError("expected auto, json or sse")
    return mode


def _parse_worker_class(value: str) -> str:
    kind = value.lower()
    if kind not in ("uvicorn", "asgi"):
        raise ValueError("expected uvicorn or asgi")
    return kind


def _parse_log_level(value: str) -> str:
    upper = value.upper()
    if upper not in LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}")
    return upper


def _parse_bind(value: str) -> str:
    parse_bind(value)  # checked here; gunicorn takes the text as it is
    return value


def _parse_secure_url(value: str) -> str:
    """An https URL, or http on a loopback host (development): where tokens and keys come from."""
    parts = urlsplit(value)
    if not parts.hostname or parts.scheme not in ("http", "https"):
        raise ValueError("expected an https:// URL with a host")
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        raise ValueError("must be https (http is accepted only on loopback, for development: an address in "
                         "127.0.0.0/8, ::1 or localhost)")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("must not carry credentials, a query string or a fragment")
    return value


def _parse_issuer(value: str) -> str:
    # Kept exactly as given (a trailing slash included): tokens' `iss` must equal it (RFC 8414 section 3.3).
    return _parse_secure_url(value)


def _parse_public_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected the bridge's public base URL, e.g. https://kb.example.com")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("must not carry credentials, a query string or a fragment")
    return value.rstrip("/")


def _parse_api_keys(value: str) -> tuple[Secret, ...]:
    keys = tuple(Secret(k) for k in parse_list(value))
    for key in keys:
        if len(key.reveal()) < 16:
            raise ValueError("each key must be at least 16 characters (use `kb-bridge token` to make one)")
        if not key.reveal().isascii() or any(c.isspace() for c in key.reveal()):
            raise ValueError("keys must be printable ASCII without spaces")
    return keys


def _parse_task_key(value: str) -> Secret:
    if len(value) < 32:
        raise ValueError("must be at least 32 characters (e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")
    return Secret(value)


# --- the loader ---------------------------------------------------------------------------


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read every kb-bridge setting from `environ` (default: the process environment)."""
    env = _Env(os.environ if environ is None else environ)
    return Settings(
        engine=_load_engine(env),
        mcp=_load_mcp(env),
        uploads=_load_uploads(env),
        server=_load_server(env),
    )


def _load_engine(env: _Env) -> EngineSettings:
    d = EngineSettings()
    return EngineSettings(
        url=env.get("KB_ENGINE_URL", d.url, _parse_engine_url),
        api_key=env.secret("KB_API_KEY"),
        connect_timeout=env.number("KB_ENGINE_CONNECT_TIMEOUT", d.connect_timeout, low=0.1, high=60),
        read_timeout=env.number("KB_ENGINE_TIMEOUT", d.read_timeout, low=0.1, high=600),
        upload_timeout=env.number("KB_ENGINE_UPLOAD_TIMEOUT", d.upload_timeout, low=1, high=7200),
        retry_attempts=env.integer("KB_ENGINE_RETRIES", d.retry_attempts, low=1, high=10),
        retry_backoff=env.number("KB_ENGINE_RETRY_BACKOFF", d.retry_backoff, low=0, high=30),
        retry_max_wait=env.number("KB_ENGINE_RETRY_MAX_WAIT", d.retry_max_wait, low=0, high=60),
        max_response_bytes=env.integer("KB_ENGINE_MAX_RESPONSE_BYTES", d.max_response_bytes, low=1024),
        pool_size=env.integer("KB_ENGINE_POOL_SIZE", d.pool_size, low=1, high=1024),
    )


def _load_mcp(env: _Env) -> McpSettings:
    d = McpSettings()
    tools = env.items("KB_MCP_TOOLS", ())
    return McpSettings(
        api_keys=env.get("KB_MCP_API_KEY", (), _parse_api_keys),
        named_tokens=env.get("KB_MCP_TOKENS_FILE", (), load_tokens_file),
        oauth=_load_oauth(env),
        allowed_hosts=env.items("KB_MCP_ALLOWED_HOSTS", d.allowed_hosts),
        allowed_origins=env.items("KB_MCP_ALLOWED_ORIGINS", d.allowed_origins),
        response_mode=env.get("KB_MCP_RESPONSE", d.response_mode, _parse_response_mode),
        max_body_bytes=env.integer("KB_MCP_MAX_BODY_BYTES", d.max_body_bytes, low=64 * 1024, high=256 * MIB),
        thread_pool_size=env.integer("KB_THREAD_POOL_SIZE", d.thread_pool_size, low=1, high=1024),
        tools=tools or None,
        read_only=env.flag("KB_MCP_READ_ONLY", d.read_only),
        wait_seconds=env.number("KB_ADDNOTE_WAIT_SECONDS", d.wait_seconds, low=0, high=600),
        metrics=env.flag("KB_METRICS", d.metrics),
        otel=env.flag("KB_OTEL", d.otel),
        metrics_token=env.secret("KB_METRICS_TOKEN"),
        task_key=env.get("KB_MCP_TASK_KEY", None, _parse_task_key),
    )


def _load_oauth(env: _Env) -> OAuthSettings:
    oauth = OAuthSettings(
        issuer=env.get("KB_OAUTH_ISSUER", None, _parse_issuer),
        public_url=env.get("KB_PUBLIC_URL", None, _parse_public_url),
        audience=env.raw("KB_OAUTH_AUDIENCE"),
        jwks_url=env.get("KB_OAUTH_JWKS_URL", None, _parse_secure_url),
    )
    if oauth.enabled and oauth.public_url is None:
        raise SettingsError("KB_PUBLIC_URL", "is required with KB_OAUTH_ISSUER: the bridge's public base URL, e.g. https://kb.example.com")
    if not oauth.enabled:
        for name, value in (("KB_OAUTH_AUDIENCE", oauth.audience), ("KB_OAUTH_JWKS_URL", oauth.jwks_url)):
            if value is not None:
                raise SettingsError(name, "has no effect without KB_OAUTH_ISSUER")
    return oauth


def _load_uploads(env: _Env) -> UploadSettings:
    d = UploadSettings()
    return UploadSettings(
        dir=env.text("KB_UPLOAD_DIR", d.dir),
        store_url=env.raw("KB_UPLOAD_STORE"),
        ttl_seconds=env.number("KB_UPLOAD_TTL_SECONDS", d.ttl_seconds, low=1),
        max_bytes=env.integer("KB_UPLOAD_MAX_BYTES", d.max_bytes, low=1),
        max_chunk_bytes=env.integer("KB_UPLOAD_MAX_CHUNK_BYTES", d.max_chunk_bytes, low=1024),
        extensions=tuple(e.lower().lstrip(".") for e in env.items("KB_UPLOAD_EXTENSIONS", d.extensions)),
        max_uploads_per_caller=env.integer("KB_UPLOAD_MAX_PER_CALLER", d.max_uploads_per_caller, low=1),
        max_staged_bytes_per_caller=env.integer("KB_UPLOAD_MAX_STAGED_BYTES", d.max_staged_bytes_per_caller, low=1),
        sweep_interval=env.number("KB_UPLOAD_SWEEP_INTERVAL", d.sweep_interval, low=0.05),
    )


def _load_server(env: _Env) -> ServerSettings:
    d = ServerSettings()
    return ServerSettings(
        bind=env.get("KB_BIND", d.bind, _parse_bind),
        workers=env.integer("KB_WORKERS", d.workers, low=1, high=256),
        log_level=env.get("KB_LOG_LEVEL", d.log_level, _parse_log_level),
        log_json=env.flag("KB_LOG_JSON", d.log_json),
        graceful_timeout=env.number("KB_GRACEFUL_TIMEOUT", d.graceful_timeout, low=1, high=3600),
        keepalive=env.integer("KB_KEEPALIVE", d.keepalive, low=0, high=3600),
        max_connections=env.integer("KB_MAX_CONNECTIONS", d.max_connections, low=2, high=100_000),
        header_timeout=env.number("KB_HEADER_TIMEOUT", d.header_timeout, low=1, high=3600),
        body_timeout=env.number("KB_BODY_TIMEOUT", d.body_timeout, low=1, high=3600),
        worker_class=env.get("KB_WORKER_CLASS", d.worker_class, _parse_worker_class),
        forwarded_allow_ips=env.get("KB_FORWARDED_ALLOW_IPS", d.forwarded_allow_ips, _parse_networks),
    )


def _parse_networks(value: str) -> tuple[str, ...]:
    """Addresses or networks (CIDR), comma-separated, as gunicorn takes them; `*` is every peer."""
    items = parse_list(value)
    for item in items:
        if item != "*":
            try:
                ipaddress.ip_network(item)
            except ValueError:
                raise ValueError(f"{item!r} is no IP address or network (e.g. 10.0.0.5 or 10.0.0.0/24)") from None
    return items


def _check_cross_field_rules(settings: Settings) -> None:
    """Rules that span settings, checked once when a Settings object is built."""
    engine_key = settings.engine.api_key
    if engine_key is not None and engine_key in settings.mcp.api_keys:
        # The agent-facing key must never unlock the engine, and vice versa.
        raise SettingsError("KB_MCP_API_KEY", "must differ from KB_API_KEY (the engine's key)")
    if engine_key is not None and "@" in urlsplit(settings.engine.url).netloc:
        # requests sends a URL's user:password as Basic auth in place of the Authorization header the key goes in:
        # the key was never sent, and the engine's 401 was reported as the engine rejecting KB_API_KEY.
        raise SettingsError("KB_ENGINE_URL", "carries a user name or password, which would be sent in place of "
                                             "KB_API_KEY: give the engine's key in KB_API_KEY alone")
    encoded_chunk = (settings.uploads.max_chunk_bytes + 2) // 3 * 4
    if encoded_chunk + 64 * 1024 > settings.mcp.max_body_bytes:
        raise SettingsError(
            "KB_UPLOAD_MAX_CHUNK_BYTES",
            f"a base64 chunk of {settings.uploads.max_chunk_bytes} bytes does not fit in "
            f"KB_MCP_MAX_BODY_BYTES={settings.mcp.max_body_bytes} with room for the JSON-RPC envelope",
        )
    if settings.uploads.max_chunk_bytes > settings.uploads.max_bytes:
        raise SettingsError("KB_UPLOAD_MAX_CHUNK_BYTES", "must not exceed KB_UPLOAD_MAX_BYTES")
    if settings.uploads.store_url is not None and not settings.uploads.store_url.startswith(
        ("redis://", "rediss://", "unix://")
    ):
        raise SettingsError("KB_UPLOAD_STORE", "expected a redis://, rediss:// or unix:// URL")
