"""The settings records: composed once at start-up (compose.py, from the table in
table.py), frozen, and passed down. Nothing below the settings reads the environment.

A field's default here is the setting's default (`--help` shows it); an engine
setting's default is the engine's own (engine/config.py), written nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from vigil.engine.bundled import MINILM, SMOLLM2
from vigil.engine.config import BatcherConfig, EngineConfig
from vigil.platform.control.specs import DEFAULT_MAX_QUEUE_WAIT_S

_ENGINE = EngineConfig()
_BATCHER = BatcherConfig()

# The KV cache budget when --kv-cache-memory is not given. 512 MiB: 11,650 tokens of
# the bundled chat model in float32 (46 KB a token), 16 sequences of 700 or one of its
# whole 8,192-token context. Measured after a benchmark run (peer_bench): the worker
# holds 1.07 GB resident with --quantization int4 on a CPU with AVX-512 VNNI, 1.57 GB
# in float32.
DEFAULT_CPU_KV_BYTES = 512 << 20
DEFAULT_CUDA_KV_FRACTION = 0.8


@dataclass(frozen=True, slots=True)
class EngineSettings:
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto | one of engine.config.DTYPES
    quantization: str = "auto"  # one of QUANTIZATIONS; auto: by the weights and the device
    torch_threads: int | None = None  # None: by step size (worker.runtime.step_threads)
    block_size: int = _ENGINE.block_size
    # The KV cache budget: bytes (an int), or a fraction (a float) of the memory free once
    # the model is loaded. None: DEFAULT_CPU_KV_BYTES on CPU, DEFAULT_CUDA_KV_FRACTION
    # of free memory on CUDA.
    kv_cache_memory: int | float | None = None
    max_num_seqs: int = _ENGINE.max_num_seqs
    max_num_batched_tokens: int = _ENGINE.max_num_batched_tokens
    max_model_len: int | None = _ENGINE.max_model_len
    embed_max_batch_size: int = _BATCHER.max_batch_size
    embed_max_wait_ms: float = _BATCHER.max_wait_ms
    enable_prefix_caching: bool = _ENGINE.enable_prefix_caching
    batch_aging_s: float = _ENGINE.batch_aging_s


# Traces kept in memory unless --trace-buffer says otherwise: tracing on by default, its
# memory bounded (a trace is a few kB), its cost measured by ops/bench/tracing_bench.py.
DEFAULT_TRACE_BUFFER = 256


@dataclass(frozen=True, slots=True)
class TraceSettings:
    """Tracing is on when spans have somewhere to go: a ring of the last traces in memory
    (`buffer`, on by default: bounded, and the console's Traces page reads it), or an OTLP
    endpoint (opt-in); with neither it is off and costs nothing."""

    otlp_endpoint: str = ""  # OTLP/HTTP base URL, e.g. http://collector:4318
    sample_ratio: float = 1.0  # of the traces without a sampled parent
    buffer: int = DEFAULT_TRACE_BUFFER  # last traces kept: /api/admin/traces, /console/traces
    # Peers whose `traceparent` is the request's parent; anyone else's is only a link.
    # CIDR networks, checked here (strings: the settings are plain data for Litestar too).
    parent_from: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.otlp_endpoint) or self.buffer > 0


@dataclass(frozen=True, slots=True)
class EdgeSettings:
    """The gateway's HTTP connections: how much of a request head is read, how long a
    client may take to send one, how many connections are served at once, and which
    peers may speak for the client (X-Forwarded-For, X-Forwarded-Proto)."""

    max_header_bytes: int = 64 << 10  # request line and headers together; more: 431
    max_header_count: int = 100  # header lines; more: 431
    header_timeout_s: float = 10.0  # from a connection's start, or a head's first byte
    body_timeout_s: float = 60.0  # the whole body, from the end of its head
    keepalive_timeout_s: float = 5.0  # an idle connection between two requests
    max_connections: int = 1000  # served at once; one more gets 503
    forwarded_allow_ips: tuple[str, ...] = ()  # proxies (IPs, CIDRs, "*"); none: no one


@dataclass(frozen=True, slots=True)
class ServeSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: Path = Path(".vigil")
    database_url: str = ""  # "" means SQLite in data_dir
    models: tuple[str, ...] = (SMOLLM2, MINILM)
    log_level: str = "info"
    engine: EngineSettings = field(default_factory=EngineSettings)
    config_path: Path | None = None  # deployments file (TOML); None: one per bundled model
    auth: str = ""  # "open" | "keys"; "" means open on a loopback host, keys otherwise
    sse_keepalive_s: float = 15.0
    workers: int = 1  # local worker processes to start (0: only remote ones register)
    routing: str = "p2c"  # p2c (load-aware, prefix affinity) | round_robin (a baseline)
    worker_token: str | None = None  # shared with workers; None: a new one per start
    # Bounds on one request, checked before any work: its body, and the text of its
    # prompt (a chat's messages together, a completion's prompt, each embedding input
    # and all of them together), so that no request can hold the gateway for long.
    max_request_bytes: int = 8 << 20
    max_prompt_chars: int = 2_000_000
    # The most choices (n) one generation may ask for: each is a sequence in the batch.
    max_choices: int = 8
    # The interactive class's max_queue_wait_s of a deployment made without its own
    # limits (control/specs.py default_limits: the batch class waits 4 times as long).
    max_queue_wait_s: float = DEFAULT_MAX_QUEUE_WAIT_S
    # Shared state of several gateways (failed sign-ins): Redis, e.g. redis://host:6379;
    # "" keeps it in this process.
    redis_url: str = ""
    # How long an undelivered webhook message is retried before it is given up.
    webhook_max_age_s: float = 86400.0
    # The whole time of one delivery attempt (connect, send, read the answer).
    webhook_timeout_s: float = 10.0
    # Hosts and networks webhooks may call beyond the public internet
    # (control/webhooks/addresses.py); --webhook-allow, repeatable.
    webhook_allow: tuple[str, ...] = ()
    # Where the artifacts of versions registered over the admin API may come from;
    # none given: the data dir's models/.
    model_dirs: tuple[Path, ...] = ()
    log_format: str = "text"  # text | json (one object per line)
    # On SIGTERM: /readyz fails at once, new requests are taken for drain_delay_s more
    # (load balancers notice), then running ones get up to drain_timeout_s to finish.
    drain_delay_s: float = 5.0
    drain_timeout_s: float = 60.0
    tracing: TraceSettings = field(default_factory=lambda: TraceSettings())
    # Signs the console's CSRF tokens; gateways behind one address share it. None: kept
    # in DATA_DIR/console-secret, made on first start.
    console_secret: str | None = None
    # A console session ends after this long without a request (it is renewed by each).
    console_session_s: int = 8 * 3600
    edge: EdgeSettings = field(default_factory=lambda: EdgeSettings())
    # The gateway's public base URL (behind a proxy or an ingress: what people and
    # alert receivers open), without a trailing slash; "" when not given.
    external_url: str = ""

    @property
    def resolved_model_dirs(self) -> tuple[Path, ...]:
        return self.model_dirs or (self.data_dir / "models",)

    @property
    def throttle_storage_uri(self) -> str:
        return f"async+{self.redis_url}" if self.redis_url else "async+memory://"

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or sqlite_url(self.data_dir)


def sqlite_url(data_dir: Path) -> str:
    return f"sqlite+aiosqlite:///{(data_dir / 'vigil.db').resolve()}"


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    gateway_urls: tuple[str, ...]  # every gateway it registers with and heart-beats
    worker_token: str
    worker_id: str
    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port
    advertise_host: str | None = None  # what the gateway should call, when not `host`
    exit_with_parent: bool = False  # a local worker of `vigil serve` (worker/local.py)
    log_level: str = "info"
    log_format: str = "text"
    engine: EngineSettings = field(default_factory=EngineSettings)
    tracing: TraceSettings = field(default_factory=lambda: TraceSettings())
    drain_timeout_s: float = 60.0  # on SIGTERM, how long running requests may take
    # Serve every address each gateway URL's host resolves to, looked up again every few
    # seconds (a Kubernetes headless Service: one address per gateway pod).
    resolve_gateways: bool = False
