"""Engine configuration: one frozen object, read from the environment in one function.

Tests build `EngineConfig(...)` directly; the CLI calls `load_config(os.environ, overrides)`. Variables are
read with the bridge's reader (kb_bridge/environment.py: an empty variable is unset, values are stripped);
its SettingsError becomes a ConfigError naming the variable here, once.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kb_bridge.environment import Env, is_loopback_host, parse_bind
from kb_bridge.errors import SettingsError

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
DATABASE_URL_VARIABLE = "KB_ENGINE_DATABASE_URL"
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
    # Reading an uploaded file into text (ingest/file_reader.py) runs in a child process that is killed past
    # this many seconds, its address space capped at this many MiB; the job then fails saying which limit.
    # Far above what real files take (a 20 MB Markdown file reads in a fraction of a second, a DOCX of
    # 22 million empty paragraphs in 40 s on 2 busy cores) and below what a pathological one would (minutes to hours).
    parse_timeout: float = 120.0
    parse_memory: int = 1024
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
    # Context from adjacent notes of a collection (search/context.py): the share of its best neighbour's
    # score a note adds to its own in hybrid search (convex fusion); 0 turns it off (docs/benchmarks.md,
    # "Memory retrieval").
    neighbour_weight: float = 0.25
    # ... plus this much of its best neighbour's BM25 share (the lexical part of its fused score); 0: off.
    neighbour_lexical_weight: float = 0.4
    # How many notes on either side are neighbours, and how much less each further one counts (the notes two
    # away count decay times the weights above; search/context.py).
    neighbour_reach: int = 2
    neighbour_decay: float = 0.5
    # How many of the best fused candidates look for their neighbours (more if more results are asked for):
    # a fixed number, so that the first results of a search do not change with top_n.
    neighbour_anchors: int = 40
    # How a lexical candidate's BM25 score is corrected in hybrid search (convex fusion) for the share of the
    # query's words it holds and for the query's word pairs standing together in it (search/term_evidence.py);
    # 0 turns either off.
    coverage_power: float = 0.5
    proximity_weight: float = 0.2
    proximity_window: int = 6
    # Diversity among hybrid results (search/diversity.py): how much a candidate's highest cosine to a result
    # already picked lowers its fused score when picking the next; 0 (the default) keeps the fused order.
    # 0.1 found more of the answers spread over several notes of a memory, at a small cost on documents
    # (docs/benchmarks.md, "Memory retrieval").
    diversity: float = 0.0
    # BM25 of a filtered search weighs each query word by its IDF among the chunks the filter allows (one
    # collection, one conversation), not the whole index (store/text_index.py). A search without a filter is
    # unchanged. Raised LoCoMo recall (docs/benchmarks.md, "Memory retrieval").
    filter_idf: bool = True
    # The vector share of the convex fusion for chunks of notes kept in a collection (search/fusion.py); None
    # (KB_ENGINE_MEMORY_VECTOR_SHARE=off): the share of every other chunk, from the weights above.
    # 0.4 against the documents' 0.5 raised LoCoMo recall (docs/benchmarks.md, "Memory retrieval").
    memory_vector_share: float | None = 0.4
    # How many times a document's title is indexed with each chunk: a title word then counts about that
    # many times a body word; 2 scored best on SciFact (docs/benchmarks.md, "What was tried, and what was
    # chosen": BM25 title weight).
    # Part of the full-text index's layout: changing it rebuilds the index at the next start.
    bm25_title_weight: int = 2
    # Below this many vectors, vector search compares with every vector (exact, about 1 ms at 20k);
    # above, it walks the HNSW graph (store/vector_index.py). 0 always uses the graph.
    exact_search_below: int = 20_000
    idempotency_ttl_seconds: int = 24 * 3600
    # Earlier versions of a note kept besides its current one (store/sql_writes.py); the oldest go first.
    keep_versions: int = 50
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

    def check_bind_is_safe(self) -> None:
        """Refuse to serve an open engine beyond this machine: a non-loopback bind needs a key."""
        if self.api_key or is_loopback_host(self.host) or self.allow_no_auth:
            return
        raise ConfigError(
            f"refusing to bind {self.bind} without KB_API_KEY: anyone who can reach it could read and "
            "change the knowledge base. Set KB_API_KEY, bind 127.0.0.1, or pass --allow-no-auth "
            "(KB_ENGINE_ALLOW_NO_AUTH=1) if the network is trusted (e.g. a private container network)."
        )


def resolve_data_dir(env: Mapping[str, str], given: Path | str | None = None) -> Path:
    """The data directory: `given` (--data), else KB_ENGINE_DATA, else the default; `~` expanded."""
    if given is None:
        given = Env(env).path("KB_ENGINE_DATA")
    return Path(given if given is not None else default_data_dir(env)).expanduser()


def default_data_dir(env: Mapping[str, str]) -> Path:
    """`$XDG_DATA_HOME/kb-bridge/engine`, else `~/.local/share/kb-bridge/engine`."""
    base = Env(env).path("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return base / "kb-bridge" / "engine"


def load_config(env: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None) -> EngineConfig:
    """Build the config from environment variables, then apply overrides (command-line options): fields of
    EngineConfig, and `bind`, the text of --bind.

    Overrides with the value None are ignored, so argparse defaults of None mean "not given".
    """
    environ = os.environ if env is None else env
    try:
        values = _read(Env(environ))
        for key, value in (overrides or {}).items():
            if value is None:
                continue
            if key == "bind":
                values["host"], values["port"] = _bind_option(value)
            else:
                values[key] = value
    except SettingsError as exc:
        raise ConfigError(str(exc)) from None
    values["data_dir"] = resolve_data_dir(environ, values.get("data_dir"))
    config = EngineConfig(**values)
    validate(config)
    return config


def _read(env: Env) -> dict[str, Any]:
    """Every field but data_dir (resolve_data_dir's): the environment's value, else the default."""
    d = EngineConfig(data_dir=Path())  # for its defaults
    host, port = env.get("KB_ENGINE_BIND", (d.host, d.port), parse_bind)
    return {
        "api_key": env.raw("KB_API_KEY"),
        "database_url": env.raw(DATABASE_URL_VARIABLE),
        "host": host,
        "port": port,
        "threads": env.integer("KB_ENGINE_THREADS", d.threads, 1, 256),
        "embedder": _choice(env, "KB_ENGINE_EMBEDDER", d.embedder),
        "wait_for_model": env.flag("KB_ENGINE_WAIT_FOR_MODEL", d.wait_for_model),
        "query_precision": _choice(env, "KB_ENGINE_QUERY_PRECISION", d.query_precision),
        "query_threads": env.integer("KB_ENGINE_QUERY_THREADS", d.query_threads, 1, 256),
        "device": _choice(env, "KB_ENGINE_DEVICE", d.device),
        "runtime": _choice(env, "KB_ENGINE_RUNTIME", d.runtime),
        "document_precision": _choice(env, "KB_ENGINE_DOCUMENT_PRECISION", d.document_precision),
        "max_upload_bytes": env.integer("KB_ENGINE_MAX_UPLOAD_BYTES", d.max_upload_bytes, 1, 1 << 40),
        "max_json_bytes": env.integer("KB_ENGINE_MAX_JSON_BYTES", d.max_json_bytes, 1024, 1 << 32),
        "parse_timeout": env.number("KB_ENGINE_PARSE_TIMEOUT", d.parse_timeout, low=0.1, high=86_400.0),
        "parse_memory": env.integer("KB_ENGINE_PARSE_MEMORY", d.parse_memory, 128, 1 << 20),
        "chunk_chars": env.integer("KB_ENGINE_CHUNK_CHARS", d.chunk_chars, 200, 100_000),
        "chunk_overlap": env.integer("KB_ENGINE_CHUNK_OVERLAP", d.chunk_overlap, 0, 50_000),
        "embed_batch_size": env.integer("KB_ENGINE_EMBED_BATCH", d.embed_batch_size, 1, 4096),
        "embed_workers": env.integer("KB_ENGINE_EMBED_WORKERS", d.embed_workers, 0, 64),
        "fusion": _choice(env, "KB_ENGINE_FUSION", d.fusion),
        "rrf_k": env.integer("KB_ENGINE_RRF_K", d.rrf_k, 0, 100_000),
        "candidates": env.integer("KB_ENGINE_CANDIDATES", d.candidates, 1, 10_000),
        "fts_weight": env.number("KB_ENGINE_FTS_WEIGHT", d.fts_weight, low=0.0),
        "vector_weight": env.number("KB_ENGINE_VECTOR_WEIGHT", d.vector_weight, low=0.0),
        "neighbour_weight": env.number("KB_ENGINE_NEIGHBOUR_WEIGHT", d.neighbour_weight, low=0.0),
        "neighbour_lexical_weight": env.number("KB_ENGINE_NEIGHBOUR_LEXICAL_WEIGHT", d.neighbour_lexical_weight,
                                               low=0.0),
        "neighbour_reach": env.integer("KB_ENGINE_NEIGHBOUR_REACH", d.neighbour_reach, 1, 8),
        "neighbour_decay": env.number("KB_ENGINE_NEIGHBOUR_DECAY", d.neighbour_decay, low=0.0, high=1.0),
        "neighbour_anchors": env.integer("KB_ENGINE_NEIGHBOUR_ANCHORS", d.neighbour_anchors, 1, 1000),
        "coverage_power": env.number("KB_ENGINE_COVERAGE_POWER", d.coverage_power, low=0.0, high=4.0),
        "proximity_weight": env.number("KB_ENGINE_PROXIMITY_WEIGHT", d.proximity_weight, low=0.0, high=4.0),
        "proximity_window": env.integer("KB_ENGINE_PROXIMITY_WINDOW", d.proximity_window, 1, 64),
        "diversity": env.number("KB_ENGINE_DIVERSITY", d.diversity, low=0.0),
        "filter_idf": env.flag("KB_ENGINE_FILTER_IDF", d.filter_idf),
        "memory_vector_share": env.get("KB_ENGINE_MEMORY_VECTOR_SHARE", d.memory_vector_share, _share_or_off),
        "bm25_title_weight": env.integer("KB_ENGINE_BM25_TITLE_WEIGHT", d.bm25_title_weight, 0, 8),
        "exact_search_below": env.integer("KB_ENGINE_EXACT_SEARCH_BELOW", d.exact_search_below, 0, 1 << 40),
        "keep_versions": env.integer("KB_ENGINE_KEEP_VERSIONS", d.keep_versions, 0, 100_000),
        "allow_no_auth": env.flag("KB_ENGINE_ALLOW_NO_AUTH", d.allow_no_auth),
        "access_log": env.flag("KB_ENGINE_ACCESS_LOG", d.access_log),
        "log_json": env.flag("KB_LOG_JSON", d.log_json),
        "allowed_hosts": _lowered(env.items("KB_ENGINE_ALLOWED_HOSTS", d.allowed_hosts)),
        "allowed_origins": _lowered(env.items("KB_ENGINE_ALLOWED_ORIGINS", d.allowed_origins)),
    }


def _share_or_off(value: str) -> float | None:
    """A share from 0 to 1, or None for `off`."""
    if value.lower() == "off":
        return None
    share = float(value)
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"expected a share from 0 to 1 or off, got {value!r}")
    return share


def _choice(env: Env, name: str, default: str) -> str:
    """One of a field's choices, in any case; `validate` checks it (options and tests set fields directly)."""
    return env.text(name, default).lower()


def _lowered(items: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(item.lower() for item in items)


def _bind_option(value: str) -> tuple[str, int]:
    """--bind, read as KB_ENGINE_BIND is; an error names the option."""
    try:
        return parse_bind(value)
    except ValueError as exc:
        raise SettingsError("--bind", str(exc)) from None


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
    if not 0.1 <= config.parse_timeout <= 86_400:
        raise ConfigError(f"--parse-timeout (KB_ENGINE_PARSE_TIMEOUT) must be between 0.1 and 86400 seconds, "
                          f"got {config.parse_timeout:g}")
    if not 128 <= config.parse_memory <= 1 << 20:
        raise ConfigError(f"--parse-memory (KB_ENGINE_PARSE_MEMORY) must be between 128 and 1048576 MiB, "
                          f"got {config.parse_memory}")
    if config.chunk_overlap >= config.chunk_chars // 2:
        raise ConfigError("KB_ENGINE_CHUNK_OVERLAP must be less than half of KB_ENGINE_CHUNK_CHARS")
