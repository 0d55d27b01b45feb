"""Every setting of every command, each declared once: its flag, its variable, the record
field it feeds, how its text is read, its help, and the commands that take it.

This table drives argparse (cli/flags.py: the flags, their help with the default and the
variable named, their choices), the environment and the composition of the records
(compose.py). A setting's default is its record field's (records.py); `default_text`
says what an empty one means. A flag beats its variable, which beats the default.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from enum import StrEnum
from typing import Any

from vigil.engine.config import DTYPES
from vigil.engine.model.config import QUANTIZATIONS
from vigil.platform.settings import values as v
from vigil.platform.settings.records import (
    DEFAULT_CPU_KV_BYTES,
    DEFAULT_CUDA_KV_FRACTION,
    ServeSettings,
    WorkerSettings,
)


class Command(StrEnum):
    SERVE = "serve"
    WORKER = "worker"
    MIGRATE = "migrate"
    KEYS = "keys"
    ADMIN = "admin"
    PLAN = "plan"


@dataclass(frozen=True, slots=True)
class Setting:
    name: str  # the flag without its dashes: "max-num-seqs" (dest: "max_num_seqs")
    field: str  # what it sets in its command's record: "port", "engine.max_num_seqs"
    help: str  # what it does; --help adds the default and the variable
    commands: frozenset[Command]
    group: str  # its section of --help
    parse: Callable[[str], Any] = v.plain  # one item's text -> value; ValueError: why not
    env: str = ""  # its variable, when not VIGIL_<NAME>
    flag: bool = True  # False: a variable only (a secret stays off the command line)
    many: str = ""  # a list: the separator of its items; the flag may be given again
    switch: bool = False  # a flag without a value: present means on
    choices: tuple[str, ...] = ()  # the values taken (lower case)
    default_text: str = ""  # what the default means, where its value does not say
    show: Callable[[object], str] = v.show  # the default as a flag would give it

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def variable(self) -> str:
        return self.env or f"VIGIL_{self.dest.upper()}"

    @property
    def label(self) -> str:
        """How an error names it: the flag and the variable, or the variable alone."""
        return f"--{self.name} ({self.variable})" if self.flag else self.variable


REQUIRED = "required"  # the default_text of a setting that has none: the command stops without it

SERVE = frozenset({Command.SERVE})
WORKER = frozenset({Command.WORKER})
BOTH = SERVE | WORKER
DATABASE = SERVE | {Command.MIGRATE, Command.KEYS, Command.ADMIN}
PLAN = frozenset({Command.PLAN})

_SERVER = "server"
_STORAGE = "storage"
_REQUESTS = "requests and admission"
_CONNECTIONS = "client connections (api/http_protocol.py)"
_ENGINE = "engine"
_TRACING = "tracing"
_WEBHOOKS = "webhooks"
_CONSOLE = "console"
_LOGS = "logs and shutdown"
_WORKER = "worker"

SETTINGS: tuple[Setting, ...] = (
    # ---- a remote worker -------------------------------------------------------------
    Setting(
        "gateway",
        "gateway_urls",
        "a gateway's base URL; the worker registers with each gateway given",
        WORKER,
        _WORKER,
        v.http_url,
        many=",",
        default_text=REQUIRED,
    ),
    Setting(
        "resolve-gateways",
        "resolve_gateways",
        "register with every address each --gateway host name resolves to, looked up "
        "every 5 s (a Kubernetes headless Service lists each gateway pod)",
        WORKER,
        _WORKER,
        v.boolean,
        switch=True,
    ),
    Setting(
        "host",
        "host",
        "address to listen on",
        WORKER,
        _WORKER,
        env="VIGIL_WORKER_HOST",
    ),
    Setting(
        "port",
        "port",
        "port to listen on (0: any free one)",
        WORKER,
        _WORKER,
        v.whole(0),
        env="VIGIL_WORKER_PORT",
    ),
    Setting(
        "advertise-host",
        "advertise_host",
        "host the gateway should call, if not --host",
        WORKER,
        _WORKER,
        default_text="--host",
    ),
    Setting(
        "worker-id",
        "worker_id",
        "a stable name for this worker",
        WORKER,
        _WORKER,
        default_text="HOSTNAME-PID",
    ),
    # ---- the gateway: where it listens, what it serves --------------------------------
    Setting(
        "host",
        "host",
        "address to listen on; on any but a loopback address, /v1 needs API keys",
        SERVE,
        _SERVER,
    ),
    Setting("port", "port", "port to listen on", SERVE, _SERVER, v.whole(0)),
    Setting(
        "models",
        "models",
        "the models to serve when `vigil serve` is given no MODEL arguments (its "
        "positional form): each a bundled name, a .gguf file, a Hugging Face folder, or "
        "NAME=PATH",
        SERVE,
        _SERVER,
        flag=False,  # the positional MODEL arguments (cli/serve.py) are its command-line form
        many=",",
    ),
    Setting(
        "config",
        "config_path",
        "deployments file (TOML): caps, queues, SLO targets, fallbacks, long-prompt pools",
        SERVE,
        _SERVER,
        v.path,
        default_text="each bundled model a deployment of its own name",
    ),
    Setting(
        "auth",
        "auth",
        "'keys' requires an API key on /v1; 'open' is allowed on loopback only",
        SERVE,
        _SERVER,
        choices=("open", "keys"),
        default_text="open on a loopback host, keys otherwise",
    ),
    Setting(
        "workers",
        "workers",
        "worker processes to start on this machine; 0 waits for remote `vigil worker`s, "
        "which need the same VIGIL_WORKER_TOKEN",
        SERVE,
        _SERVER,
        v.whole(0),
    ),
    Setting(
        "routing",
        "routing",
        "replica choice: p2c (power of two choices by load, prefix affinity) or "
        "round_robin (a baseline for benchmarks)",
        SERVE,
        _SERVER,
        choices=("p2c", "round_robin"),
    ),
    Setting(
        "external-url",
        "external_url",
        "the gateway's public base URL, as people and alert receivers reach it behind a "
        "proxy or an Ingress: absolute http(s), no query; alert links (generatorURL, "
        "externalURL, runbook_url) are built on it",
        SERVE,
        _SERVER,
        v.public_url,
        default_text="the listen address, a wildcard host named by the machine's name",
    ),
    Setting(
        "worker-token",
        "worker_token",
        "the secret gateways and workers share; every worker needs it",
        BOTH,
        _SERVER,
        flag=False,
        default_text="a gateway makes a new one each start, for its own local workers",
    ),
    # ---- storage -------------------------------------------------------------------
    Setting(
        "data-dir",
        "data_dir",
        "the data folder: the SQLite database (unless --database-url), models/ and the "
        "console secret",
        DATABASE,
        _STORAGE,
        v.path,
    ),
    Setting(
        "database-url",
        "database_url",
        "SQLAlchemy URL of the control-plane database",
        DATABASE,
        _STORAGE,
        default_text="SQLite in the data dir",
    ),
    Setting(
        "model-dir",
        "model_dirs",
        "a directory the artifacts of versions registered over the admin API may come from",
        SERVE,
        _STORAGE,
        v.path,
        env="VIGIL_MODEL_DIRS",
        many=os.pathsep,
        default_text="DATA_DIR/models",
    ),
    Setting(
        "redis-url",
        "redis_url",
        "Redis for state several gateways share (failed sign-ins, key rates), e.g. "
        "redis://127.0.0.1:6379",
        SERVE,
        _STORAGE,
        v.redis_url,
        default_text="kept in this process",
    ),
    # ---- requests and admission ----------------------------------------------------
    Setting(
        "max-request-bytes",
        "max_request_bytes",
        "largest request body taken; more gets 413",
        SERVE,
        _REQUESTS,
        v.size(1),
        show=v.format_bytes,
    ),
    Setting(
        "max-prompt-chars",
        "max_prompt_chars",
        "most characters of prompt text in one request, checked before it is tokenized; "
        "more gets 400",
        SERVE,
        _REQUESTS,
        v.whole(1),
    ),
    Setting(
        "max-choices",
        "max_choices",
        "most choices (n) one chat or completion may ask for; each is a sequence in the "
        "batch and counts as one for admission; more gets 400",
        SERVE,
        _REQUESTS,
        v.whole(1),
    ),
    Setting(
        "max-queue-wait",
        "max_queue_wait_s",
        "seconds an interactive request may wait to start before it gets 503 queue_timeout, "
        "in deployments made without their own limits (batch: 4 times as long); a "
        "deployment's `max_queue_wait_s` wins",
        SERVE,
        _REQUESTS,
        v.positive,
    ),
    Setting(
        "sse-keepalive",
        "sse_keepalive_s",
        "seconds between SSE keep-alive comments while a stream waits",
        SERVE,
        _REQUESTS,
        v.positive,
    ),
    # ---- client connections ----------------------------------------------------------
    Setting(
        "max-header-bytes",
        "edge.max_header_bytes",
        "largest request head, request line and headers together; more gets 431",
        SERVE,
        _CONNECTIONS,
        v.size(4096, " (a browser's headers alone take a few KB)"),
        show=v.format_bytes,
    ),
    Setting(
        "max-header-count",
        "edge.max_header_count",
        "most header lines in a request; more gets 431",
        SERVE,
        _CONNECTIONS,
        v.whole(1),
    ),
    Setting(
        "header-timeout",
        "edge.header_timeout_s",
        "seconds a request head may take to arrive, from the connection or its first byte; "
        "then 408 and the connection is closed",
        SERVE,
        _CONNECTIONS,
        v.positive,
    ),
    Setting(
        "body-timeout",
        "edge.body_timeout_s",
        "seconds a request body may take to arrive after its head; then 408",
        SERVE,
        _CONNECTIONS,
        v.positive,
    ),
    Setting(
        "keepalive-timeout",
        "edge.keepalive_timeout_s",
        "seconds an idle connection is kept open between requests",
        SERVE,
        _CONNECTIONS,
        v.positive,
    ),
    Setting(
        "max-connections",
        "edge.max_connections",
        "client connections served at once; a request on one more gets 503",
        SERVE,
        _CONNECTIONS,
        v.whole(1),
    ),
    Setting(
        "forwarded-allow-ips",
        "edge.forwarded_allow_ips",
        "proxy addresses or CIDRs whose X-Forwarded-For and X-Forwarded-Proto are "
        "believed ('*' trusts every peer)",
        SERVE,
        _CONNECTIONS,
        many=",",
        default_text="none",
    ),
    # ---- the engine (of local workers, or of this worker) ------------------------
    Setting(
        "device",
        "engine.device",
        "auto, cpu, cuda or cuda:N",
        BOTH,
        _ENGINE,
        v.device,
    ),
    Setting(
        "dtype",
        "engine.dtype",
        "auto (float32 on CPU, bfloat16 on CUDA), or one precision; bfloat16 on CPU pays "
        "only with AVX-512 BF16 or AMX: slower than float32 elsewhere",
        BOTH,
        _ENGINE,
        choices=("auto", *DTYPES),
    ),
    Setting(
        "quantization",
        "engine.quantization",
        "auto: by the model's weights and the device (a 4-bit GGUF as int4 on CPU, a "
        "5-8-bit one as int8, float weights as --dtype; the README's table); none: "
        "--dtype, the parity reference; int4: weight-only int4 linears (int8 output "
        "head), CPU only, a decode step at batch 1 in 0.1x float32's time with AVX-512 "
        "VNNI, 0.4x on AVX2; int8: int8 linears, CPU only",
        BOTH,
        _ENGINE,
        choices=QUANTIZATIONS,
    ),
    Setting(
        "torch-threads",
        "engine.torch_threads",
        "CPU threads for torch, the same for every step (several local workers share the "
        "cores equally)",
        BOTH,
        _ENGINE,
        v.whole(1),
        default_text="by step size: the CPU count - 1 for steps of up to 8 new tokens, "
        "leaving a core to the gateway and the worker's event loop, every core for larger "
        "ones; on 2 cores that served 16 streams 27% faster than 1 thread for all, with "
        "int4, and 2 threads for all 2% slower",
    ),
    Setting(
        "block-size",
        "engine.block_size",
        "tokens per KV cache block",
        BOTH,
        _ENGINE,
        v.whole(1),
    ),
    Setting(
        "kv-cache-memory",
        "engine.kv_cache_memory",
        "KV cache size: bytes (e.g. 512MiB) or a fraction of the memory free after "
        "loading (e.g. 0.8 or 80%)",
        BOTH,
        _ENGINE,
        v.memory,
        default_text=f"{v.format_bytes(DEFAULT_CPU_KV_BYTES)} on CPU, "
        f"{DEFAULT_CUDA_KV_FRACTION} on CUDA",
    ),
    Setting(
        "max-num-seqs",
        "engine.max_num_seqs",
        "most sequences in one batch",
        BOTH,
        _ENGINE,
        v.whole(1),
    ),
    Setting(
        "max-num-batched-tokens",
        "engine.max_num_batched_tokens",
        "token budget of one step; at least --max-num-seqs",
        BOTH,
        _ENGINE,
        v.whole(1),
    ),
    Setting(
        "max-model-len",
        "engine.max_model_len",
        "cap on prompt + output tokens",
        BOTH,
        _ENGINE,
        v.whole(1),
        default_text="the model's own context window",
    ),
    Setting(
        "no-prefix-cache",
        "engine.enable_prefix_caching",
        "turn the prefix cache off",
        BOTH,
        _ENGINE,
        v.negated,
        switch=True,
    ),
    Setting(
        "batch-aging",
        "engine.batch_aging_s",
        "seconds after which a waiting batch request goes ahead of interactive ones",
        BOTH,
        _ENGINE,
        v.positive,
    ),
    Setting(
        "embed-max-batch-size",
        "engine.embed_max_batch_size",
        "most inputs in one embedding batch",
        BOTH,
        _ENGINE,
        v.whole(1),
    ),
    Setting(
        "embed-max-wait-ms",
        "engine.embed_max_wait_ms",
        "milliseconds an embedding batch waits for more inputs",
        BOTH,
        _ENGINE,
        v.positive,
    ),
    # ---- tracing ---------------------------------------------------------------------
    Setting(
        "otlp-endpoint",
        "tracing.otlp_endpoint",
        "send request traces over OTLP/HTTP to this base URL, e.g. http://127.0.0.1:4318 "
        "(a gateway's local workers too)",
        BOTH,
        _TRACING,
        v.http_url,
        env="OTEL_EXPORTER_OTLP_ENDPOINT",
        default_text="none",
    ),
    Setting(
        "trace-sample-ratio",
        "tracing.sample_ratio",
        "share of traces kept when no trusted caller decided; failed, shed and over-SLO "
        "requests are always kept",
        BOTH,
        _TRACING,
        v.ratio,
        env="OTEL_TRACES_SAMPLER_ARG",
    ),
    Setting(
        "trace-buffer",
        "tracing.buffer",
        "keep the last N traces in memory for /api/admin/traces and the console's Traces "
        "page (0: none; then tracing is off unless --otlp-endpoint is given)",
        SERVE,
        _TRACING,
        v.whole(0),
    ),
    Setting(
        "trace-parent-from",
        "tracing.parent_from",
        "callers whose W3C traceparent a request's trace joins (a proxy or mesh that starts "
        "traces); anyone else's is kept as a link from a new trace",
        SERVE,
        _TRACING,
        v.network,
        many=",",
        default_text="nobody's is joined",
    ),
    # ---- webhooks ------------------------------------------------------------------
    Setting(
        "webhook-max-age",
        "webhook_max_age_s",
        "seconds an undelivered webhook message is retried, with back-off, before it is given up",
        SERVE,
        _WEBHOOKS,
        v.positive,
    ),
    Setting(
        "webhook-timeout",
        "webhook_timeout_s",
        "seconds one webhook delivery attempt may take in all: connecting, sending and "
        "reading the answer",
        SERVE,
        _WEBHOOKS,
        v.positive,
    ),
    Setting(
        "webhook-allow",
        "webhook_allow",
        "let webhooks call this host name or address/CIDR, which the address policy "
        "refuses by default (loopback, private, link-local, CGNAT, ...)",
        SERVE,
        _WEBHOOKS,
        v.webhook_target,
        many=",",
        default_text="public addresses only",
    ),
    # ---- the console -----------------------------------------------------------------
    Setting(
        "console-session",
        "console_session_s",
        "seconds a console session lasts without a request",
        SERVE,
        _CONSOLE,
        v.whole(60),
    ),
    Setting(
        "console-secret",
        "console_secret",
        "signs the console's forms; every gateway behind one address needs the same",
        SERVE,
        _CONSOLE,
        flag=False,
        default_text="made on first start, kept in DATA_DIR/console-secret",
    ),
    # ---- logs and shutdown -------------------------------------------------------------
    Setting(
        "log-level",
        "log_level",
        "the least severe log lines written",
        BOTH,
        _LOGS,
        choices=("debug", "info", "warning", "error"),
    ),
    Setting(
        "log-format",
        "log_format",
        "text, or json: one object per line",
        BOTH,
        _LOGS,
        choices=("text", "json"),
    ),
    Setting(
        "drain-delay",
        "drain_delay_s",
        "on SIGTERM, seconds /readyz fails while new requests are still taken, so load "
        "balancers stop sending them",
        SERVE,
        _LOGS,
        v.positive,
    ),
    Setting(
        "drain-timeout",
        "drain_timeout_s",
        "on SIGTERM (after --drain-delay on a gateway), seconds running requests and "
        "streams may take to finish",
        BOTH,
        _LOGS,
        v.positive,
    ),
    # ---- vigil plan ----------------------------------------------------------------
    Setting(
        "gateway",
        "gateway",
        "the gateway's base URL, e.g. http://127.0.0.1:8000",
        PLAN,
        _SERVER,
        v.http_url,
        default_text=REQUIRED,
    ),
)


def settings_of(command: Command) -> list[Setting]:
    return [s for s in SETTINGS if command in s.commands]


# The record each command composes; commands without one use the table's values alone.
RECORDS: dict[Command, type] = {Command.SERVE: ServeSettings, Command.WORKER: WorkerSettings}


def default_of(setting: Setting) -> str:
    """The default as --help says it: `default_text`, or the record field's value ("" for
    a switch: it is off unless given)."""
    if setting.default_text or setting.switch:
        return setting.default_text
    command = next(c for c in Command if c in setting.commands and c in RECORDS)
    record: type = RECORDS[command]
    *outer, last = setting.field.split(".")
    for name in outer:
        record = type(_field_default(record, name))
    return setting.show(_field_default(record, last))


def _field_default(record: type, name: str) -> Any:
    found = next(f for f in fields(record) if f.name == name)
    if found.default is not MISSING:
        return found.default
    assert found.default_factory is not MISSING, f"{record.__name__}.{name} has no default"
    return found.default_factory()
