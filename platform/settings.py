"""Settings, composed once at start-up from command-line flags and VIGIL_* variables.

Nothing below this module reads the environment: the frozen records built here
are passed down. A flag beats its variable, which beats the default.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from vigil.engine.bundled import MINILM, SMOLLM2
from vigil.engine.model.config import QUANTIZATIONS
from vigil.platform.control.webhooks.addresses import parse_allow_entry


class SettingsError(ValueError):
    """A setting has a value Vigil cannot use; the message names it."""


@dataclass(frozen=True, slots=True)
class EngineSettings:
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16
    quantization: str = "none"  # none | int4 (weight-only, CPU)
    torch_threads: int | None = None  # None: by step size (worker.runtime.step_threads)
    block_size: int = 16
    # The KV cache budget: bytes, or a fraction of the memory free once the model is
    # loaded. Neither set: 512 MiB on CPU, 0.8 of free memory on CUDA.
    kv_cache_memory_bytes: int | None = None
    kv_cache_memory_fraction: float | None = None
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None
    embed_max_batch_size: int = 32
    embed_max_wait_ms: float = 5.0
    max_queue_wait_s: float = 30.0  # a request not started by then gets a timeout error
    enable_prefix_caching: bool = True
    batch_aging_s: float = 10.0


@dataclass(frozen=True, slots=True)
class TraceSettings:
    """Tracing is on when spans have somewhere to go: an OTLP endpoint, or a ring of the
    last traces in memory (`buffer`); off, it costs nothing."""

    otlp_endpoint: str = ""  # OTLP/HTTP base URL, e.g. http://collector:4318
    sample_ratio: float = 1.0  # of the traces without a sampled parent
    buffer: int = 0  # the last traces kept for /api/admin/traces
    # Peers whose `traceparent` is the request's parent; anyone else's is only a link.
    # CIDR networks, checked here (strings: the settings are plain data for Litestar too).
    parent_from: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.otlp_endpoint) or self.buffer > 0


DEFAULT_TRACE_BUFFER = 256  # with an OTLP endpoint and no --trace-buffer


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


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "t": 1000**4,
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
    "ti": 1024**4,
}


def parse_bytes(text: str) -> int:
    """'1073741824', '512MiB', '2GB' -> bytes."""
    m = _SIZE.match(text)
    if not m:
        raise SettingsError(f"not a size in bytes: {text!r} (examples: 536870912, 512MiB, 2GB)")
    unit = (m.group(2) or "").lower().removesuffix("b")
    return int(float(m.group(1)) * _UNITS[unit])


def _is_fraction(text: str) -> bool:
    return text.strip().endswith("%") or re.fullmatch(r"\s*0?\.\d+\s*", text) is not None


def parse_fraction(text: str) -> float:
    """'0.5' or '50%' -> 0.5, strictly between 0 and 1."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise SettingsError(f"not a fraction: {text!r} (examples: 0.5, 50%)") from None
    if not 0 < value < 1:
        raise SettingsError(f"a memory fraction must lie between 0 and 1, got {text!r}")
    return value


def _env(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(f"VIGIL_{name}")
    return value if value not in (None, "") else None


def _pick(flag: object, env: Mapping[str, str], name: str) -> str | None:
    return str(flag) if flag is not None else _env(env, name)


def _int(value: str | None, name: str, default: int, minimum: int = 1) -> int:
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise SettingsError(f"{name} must be a whole number, got {value!r}") from None
    if number < minimum:
        raise SettingsError(f"{name} must be at least {minimum}, got {number}")
    return number


def _float(value: str | None, name: str, default: float) -> float:
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise SettingsError(f"{name} must be a number of seconds or ms, got {value!r}") from None
    if number <= 0:
        raise SettingsError(f"{name} must be positive, got {number}")
    return number


def _quantization(value: str | None) -> str:
    if value is None:
        return QUANTIZATIONS[0]  # none
    if value not in QUANTIZATIONS:
        raise SettingsError(f"quantization {value!r} is not supported ({', '.join(QUANTIZATIONS)})")
    return value


def engine_settings(flags: Mapping[str, object], env: Mapping[str, str]) -> EngineSettings:
    d = EngineSettings()
    threads = _pick(flags.get("torch_threads"), env, "TORCH_THREADS")
    max_len = _pick(flags.get("max_model_len"), env, "MAX_MODEL_LEN")
    kv = _pick(flags.get("kv_cache_memory"), env, "KV_CACHE_MEMORY")
    wait = _pick(flags.get("embed_max_wait_ms"), env, "EMBED_MAX_WAIT_MS")
    queue_wait = _pick(flags.get("max_queue_wait"), env, "MAX_QUEUE_WAIT")
    aging = _pick(flags.get("batch_aging"), env, "BATCH_AGING")
    no_prefix = flags.get("no_prefix_cache") or _env(env, "NO_PREFIX_CACHE") in ("1", "true")
    settings = EngineSettings(
        device=_pick(flags.get("device"), env, "DEVICE") or d.device,
        dtype=_pick(flags.get("dtype"), env, "DTYPE") or d.dtype,
        quantization=_quantization(_pick(flags.get("quantization"), env, "QUANTIZATION")),
        torch_threads=_int(threads, "torch threads", 0) if threads else None,
        block_size=_int(
            _pick(flags.get("block_size"), env, "BLOCK_SIZE"), "block size", d.block_size
        ),
        kv_cache_memory_bytes=parse_bytes(kv) if kv and not _is_fraction(kv) else None,
        kv_cache_memory_fraction=parse_fraction(kv) if kv and _is_fraction(kv) else None,
        max_num_seqs=_int(
            _pick(flags.get("max_num_seqs"), env, "MAX_NUM_SEQS"), "max_num_seqs", d.max_num_seqs
        ),
        max_num_batched_tokens=_int(
            _pick(flags.get("max_num_batched_tokens"), env, "MAX_NUM_BATCHED_TOKENS"),
            "max_num_batched_tokens",
            d.max_num_batched_tokens,
        ),
        max_model_len=_int(max_len, "max_model_len", 0) if max_len else None,
        embed_max_batch_size=_int(
            _pick(flags.get("embed_max_batch_size"), env, "EMBED_MAX_BATCH_SIZE"),
            "embed max batch size",
            d.embed_max_batch_size,
        ),
        embed_max_wait_ms=_float(wait, "embed max wait", d.embed_max_wait_ms),
        max_queue_wait_s=_float(queue_wait, "max queue wait", d.max_queue_wait_s),
        enable_prefix_caching=not no_prefix,
        batch_aging_s=_float(aging, "batch aging", d.batch_aging_s),
    )
    if settings.max_num_batched_tokens < settings.max_num_seqs:
        raise SettingsError(
            f"max_num_batched_tokens ({settings.max_num_batched_tokens}) must be at least "
            f"max_num_seqs ({settings.max_num_seqs}): each running sequence needs a token"
        )
    return settings


def serve_settings(
    flags: Mapping[str, object], env: Mapping[str, str] | None = None
) -> ServeSettings:
    env = os.environ if env is None else env
    d = ServeSettings()
    models = _pick(flags.get("models"), env, "MODELS")
    host = _pick(flags.get("host"), env, "HOST") or d.host
    return ServeSettings(
        host=host,
        port=_int(_pick(flags.get("port"), env, "PORT"), "port", d.port, minimum=0),
        data_dir=Path(_pick(flags.get("data_dir"), env, "DATA_DIR") or d.data_dir),
        database_url=_pick(flags.get("database_url"), env, "DATABASE_URL") or "",
        models=tuple(m.strip() for m in models.split(",") if m.strip()) if models else d.models,
        log_level=(_pick(flags.get("log_level"), env, "LOG_LEVEL") or d.log_level).lower(),
        engine=engine_settings(flags, env),
        config_path=Path(config) if (config := _pick(flags.get("config"), env, "CONFIG")) else None,
        auth=_auth_mode(_pick(flags.get("auth"), env, "AUTH"), host),
        sse_keepalive_s=_float(
            _pick(flags.get("sse_keepalive"), env, "SSE_KEEPALIVE"),
            "SSE keep-alive",
            d.sse_keepalive_s,
        ),
        workers=_int(_pick(flags.get("workers"), env, "WORKERS"), "workers", d.workers, minimum=0),
        worker_token=_env(env, "WORKER_TOKEN"),
        routing=_routing(_pick(flags.get("routing"), env, "ROUTING") or d.routing),
        max_request_bytes=_bytes_or(
            _pick(flags.get("max_request_bytes"), env, "MAX_REQUEST_BYTES"), d.max_request_bytes
        ),
        model_dirs=_model_dirs(flags.get("model_dir"), _env(env, "MODEL_DIRS")),
        webhook_max_age_s=_float(
            _pick(flags.get("webhook_max_age"), env, "WEBHOOK_MAX_AGE"),
            "webhook max age",
            d.webhook_max_age_s,
        ),
        webhook_timeout_s=_float(
            _pick(flags.get("webhook_timeout"), env, "WEBHOOK_TIMEOUT"),
            "webhook timeout",
            d.webhook_timeout_s,
        ),
        webhook_allow=_webhook_allow(flags.get("webhook_allow"), _env(env, "WEBHOOK_ALLOW")),
        redis_url=_redis_url(_pick(flags.get("redis_url"), env, "REDIS_URL") or ""),
        log_format=_log_format(_pick(flags.get("log_format"), env, "LOG_FORMAT") or "text"),
        drain_delay_s=_float(
            _pick(flags.get("drain_delay"), env, "DRAIN_DELAY"), "drain delay", d.drain_delay_s
        ),
        drain_timeout_s=_float(
            _pick(flags.get("drain_timeout"), env, "DRAIN_TIMEOUT"),
            "drain timeout",
            d.drain_timeout_s,
        ),
        tracing=trace_settings(flags, env),
        max_prompt_chars=_int(
            _pick(flags.get("max_prompt_chars"), env, "MAX_PROMPT_CHARS"),
            "max prompt chars",
            d.max_prompt_chars,
        ),
        max_choices=_int(_env(env, "MAX_CHOICES"), "max choices", d.max_choices),
        console_secret=_env(env, "CONSOLE_SECRET"),
        console_session_s=_int(
            _pick(flags.get("console_session"), env, "CONSOLE_SESSION"),
            "console session",
            d.console_session_s,
            minimum=60,
        ),
        edge=edge_settings(flags, env),
    )


MIN_HEADER_BYTES = 4096


def edge_settings(flags: Mapping[str, object], env: Mapping[str, str]) -> EdgeSettings:
    d = EdgeSettings()
    header_bytes = _pick(flags.get("max_header_bytes"), env, "MAX_HEADER_BYTES")
    allow = _pick(flags.get("forwarded_allow_ips"), env, "FORWARDED_ALLOW_IPS") or ""
    max_header_bytes = _bytes_or(header_bytes, d.max_header_bytes)
    if max_header_bytes < MIN_HEADER_BYTES:
        raise SettingsError(
            f"max header bytes must be at least {MIN_HEADER_BYTES} (a browser's headers "
            f"alone take a few KB), got {max_header_bytes}"
        )
    return EdgeSettings(
        max_header_bytes=max_header_bytes,
        max_header_count=_int(
            _pick(flags.get("max_header_count"), env, "MAX_HEADER_COUNT"),
            "max header count",
            d.max_header_count,
        ),
        header_timeout_s=_float(
            _pick(flags.get("header_timeout"), env, "HEADER_TIMEOUT"),
            "header timeout",
            d.header_timeout_s,
        ),
        body_timeout_s=_float(
            _pick(flags.get("body_timeout"), env, "BODY_TIMEOUT"), "body timeout", d.body_timeout_s
        ),
        keepalive_timeout_s=_float(
            _pick(flags.get("keepalive_timeout"), env, "KEEPALIVE_TIMEOUT"),
            "keep-alive timeout",
            d.keepalive_timeout_s,
        ),
        max_connections=_int(
            _pick(flags.get("max_connections"), env, "MAX_CONNECTIONS"),
            "max connections",
            d.max_connections,
        ),
        forwarded_allow_ips=tuple(a.strip() for a in allow.split(",") if a.strip()),
    )


def trace_settings(flags: Mapping[str, object], env: Mapping[str, str]) -> TraceSettings:
    """--otlp-endpoint (or OTEL_EXPORTER_OTLP_ENDPOINT), --trace-sample-ratio (or
    OTEL_TRACES_SAMPLER_ARG), --trace-buffer (VIGIL_TRACE_BUFFER), --trace-parent-from
    (VIGIL_TRACE_PARENT_FROM)."""
    endpoint = str(flags.get("otlp_endpoint") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "")
    if endpoint and not endpoint.startswith(("http://", "https://")):
        raise SettingsError(f"the OTLP endpoint must be an http(s) URL, got {endpoint!r}")
    ratio_text = flags.get("trace_sample_ratio") or env.get("OTEL_TRACES_SAMPLER_ARG")
    ratio = _float(str(ratio_text) if ratio_text is not None else None, "trace sample ratio", 1.0)
    if not 0.0 <= ratio <= 1.0:
        raise SettingsError(f"the trace sample ratio must be within [0, 1], got {ratio}")
    default_buffer = DEFAULT_TRACE_BUFFER if endpoint else 0
    buffer = _int(
        _pick(flags.get("trace_buffer"), env, "TRACE_BUFFER"), "trace buffer", default_buffer
    )
    parent_from = _networks(
        flags.get("trace_parent_from"), _env(env, "TRACE_PARENT_FROM"), "--trace-parent-from"
    )
    return TraceSettings(endpoint, ratio, buffer, parent_from)


def _networks(flag: object, env_value: str | None, what: str) -> tuple[str, ...]:
    """Addresses and CIDR networks, from a repeatable flag (each may be a comma-separated
    list) or else the variable's comma-separated list; each as a network (10.0.0.0/8)."""
    given = [str(f) for f in flag] if isinstance(flag, list | tuple) else []
    if not given and env_value:
        given = [env_value]
    networks = []
    for item in (v.strip() for g in given for v in g.split(",")):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False).with_prefixlen)
        except ValueError:
            raise SettingsError(
                f"{what} takes IP addresses or CIDR networks (127.0.0.1, 10.0.0.0/8), got {item!r}"
            ) from None
    return tuple(networks)


def trace_env(settings: TraceSettings) -> dict[str, str]:
    """What a local worker needs to export its spans the same way."""
    if not settings.otlp_endpoint:
        return {}
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": settings.otlp_endpoint,
        "OTEL_TRACES_SAMPLER_ARG": str(settings.sample_ratio),
    }


def _log_format(value: str) -> str:
    if value not in ("text", "json"):
        raise SettingsError(f"the log format must be 'text' or 'json', got {value!r}")
    return value


def _model_dirs(flags: object, env_value: str | None) -> tuple[Path, ...]:
    """--model-dir, repeatable; or VIGIL_MODEL_DIRS, separated by the path separator."""
    if isinstance(flags, list) and flags:
        return tuple(Path(str(d)) for d in flags)
    return tuple(Path(d) for d in (env_value or "").split(os.pathsep) if d)


def _webhook_allow(flags: object, env_value: str | None) -> tuple[str, ...]:
    """--webhook-allow, repeatable; or VIGIL_WEBHOOK_ALLOW, comma-separated."""
    if isinstance(flags, list) and flags:
        entries = [str(e) for e in flags]
    else:
        entries = [e for e in (env_value or "").split(",") if e.strip()]
    for entry in entries:
        try:
            parse_allow_entry(entry)
        except ValueError as exc:
            raise SettingsError(f"--webhook-allow: {exc}") from None
    return tuple(e.strip() for e in entries)


def _redis_url(value: str) -> str:
    if value and not value.startswith(("redis://", "rediss://")):
        raise SettingsError(f"the Redis URL must start with redis:// or rediss://, got {value!r}")
    return value


def _bytes_or(value: str | None, default: int) -> int:
    return default if value is None else parse_bytes(value)


def _routing(value: str) -> str:
    if value not in ("p2c", "round_robin"):
        raise SettingsError(f"routing must be 'p2c' or 'round_robin', got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    gateway_urls: tuple[str, ...]  # every gateway it registers with and heart-beats
    token: str
    worker_id: str
    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port
    advertise_host: str | None = None  # what the gateway should call, when not `host`
    exit_with_parent: bool = False
    log_level: str = "info"
    log_format: str = "text"
    engine: EngineSettings = field(default_factory=EngineSettings)
    tracing: TraceSettings = field(default_factory=lambda: TraceSettings())
    drain_timeout_s: float = 60.0  # on SIGTERM, how long running requests may take
    # Serve every address each gateway URL's host resolves to, looked up again every few
    # seconds (a Kubernetes headless Service: one address per gateway pod).
    resolve_gateways: bool = False


def worker_settings(
    flags: Mapping[str, object], env: Mapping[str, str] | None = None
) -> WorkerSettings:
    env = os.environ if env is None else env
    gateways = gateway_urls(flags.get("gateway"), _env(env, "GATEWAY"))
    token = _pick(flags.get("token"), env, "WORKER_TOKEN")
    if not gateways:
        raise SettingsError("a worker needs --gateway URL (or VIGIL_GATEWAY)")
    if not token:
        raise SettingsError("a worker needs the gateway's worker token: VIGIL_WORKER_TOKEN")
    return WorkerSettings(
        gateway_urls=gateways,
        token=token,
        worker_id=_pick(flags.get("worker_id"), env, "WORKER_ID")
        or f"{socket.gethostname()}-{os.getpid()}",
        host=str(flags.get("host") or "127.0.0.1"),
        port=_int(
            str(flags["port"]) if flags.get("port") is not None else None, "port", 0, minimum=0
        ),
        advertise_host=_pick(flags.get("advertise_host"), env, "ADVERTISE_HOST"),
        exit_with_parent=bool(flags.get("exit_with_parent")),
        log_level=(_pick(flags.get("log_level"), env, "LOG_LEVEL") or "info").lower(),
        log_format=_log_format(_pick(flags.get("log_format"), env, "LOG_FORMAT") or "text"),
        engine=engine_settings(flags, env),
        tracing=trace_settings(flags, env),
        drain_timeout_s=_float(
            _pick(flags.get("drain_timeout"), env, "DRAIN_TIMEOUT"), "drain timeout", 60.0
        ),
        resolve_gateways=bool(flags.get("resolve_gateways"))
        or _env(env, "RESOLVE_GATEWAYS") in ("1", "true", "yes"),
    )


def gateway_urls(flag: object, env_value: str | None) -> tuple[str, ...]:
    """The gateways a worker serves: --gateway given once or more, each a URL or a
    comma-separated list of them (the flags win over VIGIL_GATEWAY, which may be a list
    too); repeats dropped, order kept."""
    if isinstance(flag, list | tuple):
        given = [str(f) for f in flag]
    elif flag is not None:
        given = [str(flag)]
    else:
        given = [env_value] if env_value else []
    urls = [u.strip().rstrip("/") for item in given for u in item.split(",") if u.strip()]
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise SettingsError(f"a gateway URL must start with http:// or https://, got {url!r}")
    return tuple(dict.fromkeys(urls))


def local_worker_engine(settings: EngineSettings, workers: int, cpus: int) -> EngineSettings:
    """The engine settings of one of `workers` worker processes on this machine: with
    more than one and no --torch-threads, each gets an equal share of the cores for
    every step, so that their prefills never run more threads than there are cores."""
    if workers <= 1 or settings.torch_threads:
        return settings
    return replace(settings, torch_threads=max(1, cpus // workers))


def engine_env(settings: EngineSettings) -> dict[str, str]:
    """The VIGIL_* variables that give a child process these engine settings."""
    env = {
        "VIGIL_DEVICE": settings.device,
        "VIGIL_DTYPE": settings.dtype,
        "VIGIL_QUANTIZATION": settings.quantization,
        "VIGIL_BLOCK_SIZE": str(settings.block_size),
        "VIGIL_MAX_NUM_SEQS": str(settings.max_num_seqs),
        "VIGIL_MAX_NUM_BATCHED_TOKENS": str(settings.max_num_batched_tokens),
        "VIGIL_EMBED_MAX_BATCH_SIZE": str(settings.embed_max_batch_size),
        "VIGIL_EMBED_MAX_WAIT_MS": str(settings.embed_max_wait_ms),
        "VIGIL_MAX_QUEUE_WAIT": str(settings.max_queue_wait_s),
        "VIGIL_BATCH_AGING": str(settings.batch_aging_s),
        "VIGIL_NO_PREFIX_CACHE": "" if settings.enable_prefix_caching else "1",
    }
    if settings.torch_threads is not None:
        env["VIGIL_TORCH_THREADS"] = str(settings.torch_threads)
    if settings.max_model_len is not None:
        env["VIGIL_MAX_MODEL_LEN"] = str(settings.max_model_len)
    if settings.kv_cache_memory_bytes is not None:
        env["VIGIL_KV_CACHE_MEMORY"] = str(settings.kv_cache_memory_bytes)
    elif settings.kv_cache_memory_fraction is not None:
        env["VIGIL_KV_CACHE_MEMORY"] = str(settings.kv_cache_memory_fraction)
    return env


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def _auth_mode(value: str | None, host: str) -> str:
    if value is None:
        return "open" if host in LOOPBACK_HOSTS else "keys"
    if value not in ("open", "keys"):
        raise SettingsError(f"auth must be 'open' or 'keys', got {value!r}")
    if value == "open" and host not in LOOPBACK_HOSTS:
        raise SettingsError(
            f"auth 'open' is only allowed on a loopback host, not {host!r}: anyone who can "
            "reach the port could use it. Create API keys (vigil keys create) instead."
        )
    return value


def database_url(
    flag: str | None, data_dir: str | None, env: Mapping[str, str] | None = None
) -> str:
    """For commands that only touch the database (`vigil migrate`)."""
    env = os.environ if env is None else env
    url = flag or _env(env, "DATABASE_URL")
    return url or sqlite_url(Path(data_dir or _env(env, "DATA_DIR") or ServeSettings().data_dir))
