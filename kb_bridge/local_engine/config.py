"""Engine configuration: one frozen object, read from the environment in one function.

Tests build `EngineConfig(...)` directly; the CLI calls `load_config(os.environ, overrides)`.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import database_url
from .embedding.device import DEVICE_CHOICES
from .embedding.precision import PRECISION_CHOICES
from .embedding.runtime import RUNTIME_CHOICES
from .errors import ConfigError

MiB = 1024 * 1024
EMBEDDER_CHOICES = ("auto", "minilm", "none")
FUSION_CHOICES = ("convex", "rrf")
# In the data directory: the SQLite store, and the staged files of jobs not yet done.
DATABASE_FILE = "engine.sqlite3"
UPLOADS_DIR = "uploads"


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """Everything the engine can be told. Defaults are the documented ones (docs/engine.md)."""

    data_dir: Path
    # Secrets stay out of the config's repr, so that printing or logging a config shows neither.
    api_key: str | None = dataclasses.field(default=None, repr=False)
    # postgresql://user:password@host:port/db selects the PostgreSQL store (store/postgres/); None: SQLite in
    # data_dir. Checked at load and never shown with its password (database_url.py).
    database_url: str | None = dataclasses.field(default=None, repr=False)
    host: str = "127.0.0.1"
    port: int = 8000
    threads: int = 8
    # "auto": the bundled model when the `engine` extra is installed, else full text only;
    # "minilm": the model or fail at start; "none": full text only even when the model is installed.
    embedder: str = "auto"
    # Load the model before serving (True) or in the background while full-text search already works.
    wait_for_model: bool = False
    # How queries are embedded (embedding/query_model.py): "auto" takes bfloat16 where this CPU runs it faster
    # with the same vectors, else float32; one torch thread, the fastest on 2 busy cores (docs/benchmarks.md,
    # "What was tried, and what was chosen": query embedding latency).
    query_precision: str = "auto"
    query_threads: int = 1
    # Where the model runs (embedding/device.py): auto takes CUDA, then MPS, then the CPU.
    device: str = "auto"
    # What runs the model (embedding/runtime.py): auto takes torch when it is installed and a GPU is present,
    # else ONNX Runtime on the CPU; onnx; torch (the `gpu` extra).
    runtime: str = "auto"
    # How documents are embedded: "auto" takes the 16-bit format where it is faster with the same vectors
    # (embedding/precision.py), else float32.
    document_precision: str = "auto"
    max_upload_bytes: int = 600 * MiB
    max_json_bytes: int = 32 * MiB
    chunk_chars: int = 1000
    chunk_overlap: int = 150
    # Chunks per model call; several jobs' chunks share a call (ingest/worker.py). 16, among the fastest in
    # float32 on 2 CPU cores (docs/benchmarks.md, "Ingestion at the speed of the model").
    embed_batch_size: int = 16
    # Copies of the model that embed documents side by side, each on its own thread (embedding/document_pool.py);
    # 0: one per core up to 4 on a CPU, one on a GPU.
    embed_workers: int = 0
    # Hybrid fusion (search/fusion.py): "convex" sums cosine and BM25-share-of-its-ceiling with these weights;
    # "rrf" sums weight / (rrf_k + rank). convex 1:1 over 100 candidates scored best on SciFact's train claims
    # (docs/benchmarks.md, "What was tried, and what was chosen": fusion).
    fusion: str = "convex"
    rrf_k: int = 5
    candidates: int = 100
    fts_weight: float = 1.0
    vector_weight: float = 1.0
    # How many times a document's title is indexed with each chunk: a title word then counts about that
    # many times a body word; 2 scored best on SciFact (docs/benchmarks.md, "What was tried, and what was
    # chosen": BM25 title weight).
    # Part of the full-text index's layout: changing it rebuilds the index at the next start.
    bm25_title_weight: int = 2
    # Below this many vectors, vector search compares with every vector (exact, about 1 ms at 20k);
    # above, it walks the HNSW graph (store/vector_index.py). 0 always uses the graph.
    exact_search_below: int = 20_000
    idempotency_ttl_seconds: int = 24 * 3600
    allow_no_auth: bool = False
    access_log: bool = False
    # Log lines as JSON objects (the bridge's format), or plain text; KB_LOG_JSON governs both programs.
    log_json: bool = True
    # Host names (any port) the API answers besides loopback and the bind address (DNS-rebinding guard,
    # api/guard.py), e.g. "engine" when compose reaches it as engine:8000; "*" for any.
    allowed_hosts: tuple[str, ...] = ()
    # Origins (scheme://host[:port]) allowed besides the engine's own; a browser's cross-site request is 403.
    allowed_origins: tuple[str, ...] = ()

    @property
    def database_path(self) -> Path:
        return self.data_dir / DATABASE_FILE

    @property
    def uploads_dir(self) -> Path:
        return self.data_dir / UPLOADS_DIR

    @property
    def bind(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def check_bind_is_safe(self) -> None:
        """Refuse to serve an open engine beyond this machine: a non-loopback bind needs a key."""
        if self.api_key or self.is_loopback() or self.allow_no_auth:
            return
        raise ConfigError(
            f"refusing to bind {self.bind} without KB_API_KEY: anyone who can reach it could read and "
            "change the knowledge base. Set KB_API_KEY, bind 127.0.0.1, or pass --allow-no-auth "
            "(KB_ENGINE_ALLOW_NO_AUTH=1) if the network is trusted (e.g. a private container network)."
        )


def resolve_data_dir(env: Mapping[str, str], given: Path | str | None = None) -> Path:
    """The data directory: `given` (--data), else KB_ENGINE_DATA, else the default; `~` expanded."""
    if given is None and env.get("KB_ENGINE_DATA"):
        given = env["KB_ENGINE_DATA"]
    return Path(given if given is not None else default_data_dir(env)).expanduser()


def default_data_dir(env: Mapping[str, str]) -> Path:
    """`$XDG_DATA_HOME/kb-bridge/engine`, else `~/.local/share/kb-bridge/engine`."""
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "kb-bridge" / "engine"


def parse_bind(value: str, name: str = "--bind") -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::1]:8000`) into its parts."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"{name} must be HOST:PORT, got {value!r}")
    host = host.strip("[]")
    port = _int_in_range(port_text, name, 0, 65535)
    return host, port


def load_config(env: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None) -> EngineConfig:
    """Build the config from environment variables, then apply overrides (command-line options).

    Overrides with the value None are ignored, so argparse defaults of None mean "not given".
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {"data_dir": Path(env["KB_ENGINE_DATA"]) if env.get("KB_ENGINE_DATA") else None}
    values["api_key"] = env.get("KB_API_KEY") or None
    values["database_url"] = env.get("KB_ENGINE_DATABASE_URL", "").strip() or None
    if env.get("KB_ENGINE_BIND"):
        values["host"], values["port"] = parse_bind(env["KB_ENGINE_BIND"], "KB_ENGINE_BIND")
    for field, var, low, high in _INT_VARS:
        if env.get(var):
            values[field] = _int_in_range(env[var], var, low, high)
    for field, var in _FLOAT_VARS:
        if env.get(var):
            values[field] = _positive_float(env[var], var)
    for field, var in _BOOL_VARS:
        if env.get(var):
            values[field] = _bool(env[var], var)
    for field, var in _CHOICE_VARS:
        if env.get(var):
            values[field] = env[var].strip().lower()
    for field, var in _LIST_VARS:
        if env.get(var):
            values[field] = tuple(item.strip().lower() for item in env[var].split(",") if item.strip())
    for key, value in (overrides or {}).items():
        if value is not None:
            values[key] = value
    values["data_dir"] = resolve_data_dir(env, values.get("data_dir"))
    config = EngineConfig(**values)
    validate(config)
    return config


def validate(config: EngineConfig) -> None:
    """Cross-field rules, checked once at load."""
    if config.embedder not in EMBEDDER_CHOICES:
        raise ConfigError(f"KB_ENGINE_EMBEDDER must be one of {', '.join(EMBEDDER_CHOICES)}, got {config.embedder!r}")
    if config.fusion not in FUSION_CHOICES:
        raise ConfigError(f"KB_ENGINE_FUSION must be one of {', '.join(FUSION_CHOICES)}, got {config.fusion!r}")
    for value, name in ((config.query_precision, "KB_ENGINE_QUERY_PRECISION"),
                        (config.document_precision, "KB_ENGINE_DOCUMENT_PRECISION")):
        if value not in PRECISION_CHOICES:
            raise ConfigError(f"{name} must be one of {', '.join(PRECISION_CHOICES)}, got {value!r}")
    if config.device not in DEVICE_CHOICES:
        raise ConfigError(f"KB_ENGINE_DEVICE (--device) must be one of {', '.join(DEVICE_CHOICES)}, "
                          f"got {config.device!r}")
    if config.runtime not in RUNTIME_CHOICES:
        raise ConfigError(f"KB_ENGINE_RUNTIME must be one of {', '.join(RUNTIME_CHOICES)}, got {config.runtime!r}")
    if config.fusion == "convex" and config.fts_weight + config.vector_weight <= 0:
        raise ConfigError("KB_ENGINE_FTS_WEIGHT and KB_ENGINE_VECTOR_WEIGHT cannot both be 0")
    if not 1 <= config.threads <= 256:
        raise ConfigError(f"--threads (KB_ENGINE_THREADS) must be between 1 and 256, got {config.threads}")
    if config.database_url is not None:
        database_url.check(config.database_url, "KB_ENGINE_DATABASE_URL (--database-url)")
    if config.chunk_overlap >= config.chunk_chars // 2:
        raise ConfigError("KB_ENGINE_CHUNK_OVERLAP must be less than half of KB_ENGINE_CHUNK_CHARS")


_INT_VARS = (
    ("threads", "KB_ENGINE_THREADS", 1, 256),
    ("max_upload_bytes", "KB_ENGINE_MAX_UPLOAD_BYTES", 1, 1 << 40),
    ("max_json_bytes", "KB_ENGINE_MAX_JSON_BYTES", 1024, 1 << 32),
    ("chunk_chars", "KB_ENGINE_CHUNK_CHARS", 200, 100_000),
    ("chunk_overlap", "KB_ENGINE_CHUNK_OVERLAP", 0, 50_000),
    ("embed_batch_size", "KB_ENGINE_EMBED_BATCH", 1, 4096),
    ("embed_workers", "KB_ENGINE_EMBED_WORKERS", 0, 64),
    ("query_threads", "KB_ENGINE_QUERY_THREADS", 1, 256),
    ("rrf_k", "KB_ENGINE_RRF_K", 0, 100_000),
    ("candidates", "KB_ENGINE_CANDIDATES", 1, 10_000),
    ("bm25_title_weight", "KB_ENGINE_BM25_TITLE_WEIGHT", 0, 8),
    ("exact_search_below", "KB_ENGINE_EXACT_SEARCH_BELOW", 0, 1 << 40),
)
_FLOAT_VARS = (
    ("fts_weight", "KB_ENGINE_FTS_WEIGHT"),
    ("vector_weight", "KB_ENGINE_VECTOR_WEIGHT"),
)
_CHOICE_VARS = (
    ("embedder", "KB_ENGINE_EMBEDDER"),
    ("fusion", "KB_ENGINE_FUSION"),
    ("query_precision", "KB_ENGINE_QUERY_PRECISION"),
    ("document_precision", "KB_ENGINE_DOCUMENT_PRECISION"),
    ("device", "KB_ENGINE_DEVICE"),
    ("runtime", "KB_ENGINE_RUNTIME"),
)
_LIST_VARS = (
    ("allowed_hosts", "KB_ENGINE_ALLOWED_HOSTS"),
    ("allowed_origins", "KB_ENGINE_ALLOWED_ORIGINS"),
)
_BOOL_VARS = (
    ("wait_for_model", "KB_ENGINE_WAIT_FOR_MODEL"),
    ("allow_no_auth", "KB_ENGINE_ALLOW_NO_AUTH"),
    ("access_log", "KB_ENGINE_ACCESS_LOG"),
    ("log_json", "KB_LOG_JSON"),
)


def _int_in_range(text: str, name: str, low: int, high: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {text!r}") from None
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low} and {high}, got {value}")
    return value


def _positive_float(text: str, name: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {text!r}") from None
    if not value >= 0:
        raise ConfigError(f"{name} must be zero or more, got {text!r}")
    return value


def _bool(text: str, name: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"{name} must be 1/0, true/false, yes/no or on/off, got {text!r}")
