"""`vigil`: the command line. Each subcommand composes its settings once and runs."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from vigil.engine.request import Priority
from vigil.platform.settings import SettingsError, database_url, serve_settings

if TYPE_CHECKING:
    from vigil.platform.control.access.records import ApiKeyRecord

log = logging.getLogger("vigil")


def _add_engine_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("engine")
    g.add_argument("--device", help="auto (default), cpu, cuda or cuda:N  [VIGIL_DEVICE]")
    g.add_argument(
        "--dtype",
        help="auto (default: float32 on CPU, bfloat16 on CUDA), float32, "
        "bfloat16 (on CPU it pays only with AVX-512 BF16 or AMX: slower than float32 "
        "elsewhere), float16  [VIGIL_DTYPE]",
    )
    g.add_argument(
        "--quantization",
        help="none (default) or int4: weight-only int4 linears (int8 output head), CPU "
        "only; a decode step at batch 1 in 0.1x float32's time on CPUs with AVX-512 VNNI, "
        "0.4x on AVX2 ones; parity bound in the README  [VIGIL_QUANTIZATION]",
    )
    g.add_argument(
        "--torch-threads",
        type=int,
        help="CPU threads for torch, the same for every step (default: by step size: the "
        "CPU count - 1 for steps of up to 8 new tokens, leaving a core to the gateway and "
        "the worker's event loop, every core for larger ones; on 2 cores that served 16 "
        "streams 27%% faster than 1 thread for all, with int4, and 2 threads for all "
        "2%% slower; several local workers share the cores equally)  [VIGIL_TORCH_THREADS]",
    )
    g.add_argument("--block-size", type=int, help="tokens per KV cache block (16)")
    g.add_argument(
        "--kv-cache-memory",
        help="KV cache size: bytes (e.g. 512MiB, the CPU default) or a fraction of the memory "
        "free after loading (e.g. 0.8, the CUDA default)  [VIGIL_KV_CACHE_MEMORY]",
    )
    g.add_argument("--max-num-seqs", type=int, help="most sequences in one batch (32)")
    g.add_argument("--max-num-batched-tokens", type=int, help="token budget of one step (2048)")
    g.add_argument("--max-model-len", type=int, help="cap on prompt + output tokens")
    g.add_argument(
        "--max-queue-wait",
        type=float,
        help="seconds a request may wait to start before it times out (30)",
    )
    g.add_argument(
        "--no-prefix-cache",
        action="store_true",
        default=None,
        help="turn the prefix cache off  [VIGIL_NO_PREFIX_CACHE=1]",
    )
    g.add_argument(
        "--batch-aging",
        type=float,
        help="seconds after which a waiting batch request goes ahead of interactive ones (10)",
    )
    g.add_argument("--embed-max-batch-size", type=int, help="embedding batch size cap (32)")
    g.add_argument("--embed-max-wait-ms", type=float, help="embedding batch window (5 ms)")


# The variables `vigil serve` and `vigil worker` read for their flags (settings.py), by
# the flag's dest: each flag's help names its own.
SERVE_ENV = {
    dest: f"VIGIL_{dest.upper()}"
    for dest in [
        "host",
        "port",
        "data_dir",
        "database_url",
        "models",
        "config",
        "auth",
        "sse_keepalive",
        "workers",
        "routing",
        "max_request_bytes",
        "max_prompt_chars",
        "redis_url",
        "webhook_max_age",
        "webhook_timeout",
        "log_level",
        "log_format",
        "drain_delay",
        "drain_timeout",
        "trace_buffer",
        "trace_parent_from",
        "console_session",
    ]
} | {
    "model_dir": "VIGIL_MODEL_DIRS",
    "webhook_allow": "VIGIL_WEBHOOK_ALLOW",
    "otlp_endpoint": "OTEL_EXPORTER_OTLP_ENDPOINT",
    "trace_sample_ratio": "OTEL_TRACES_SAMPLER_ARG",
}
WORKER_ENV = {
    dest: f"VIGIL_{dest.upper()}"
    for dest in [
        "gateway",
        "resolve_gateways",
        "worker_id",
        "advertise_host",
        "log_level",
        "log_format",
        "drain_timeout",
    ]
} | {"otlp_endpoint": "OTEL_EXPORTER_OTLP_ENDPOINT"}
ENGINE_ENV = {
    dest: f"VIGIL_{dest.upper()}"
    for dest in [
        "device",
        "dtype",
        "quantization",
        "torch_threads",
        "block_size",
        "kv_cache_memory",
        "max_num_seqs",
        "max_num_batched_tokens",
        "max_model_len",
        "max_queue_wait",
        "batch_aging",
        "embed_max_batch_size",
        "embed_max_wait_ms",
    ]
}


def _name_variables(parser: argparse.ArgumentParser, env: dict[str, str]) -> None:
    for action in parser._actions:
        name = env.get(action.dest)
        if name and action.help and f"[{name}]" not in action.help:
            action.help = f"{action.help}  [{name}]"


def _add_edge_flags(serve: argparse.ArgumentParser) -> None:
    """Bounds on client connections (see api/http_protocol.py), and the proxies trusted."""
    serve.add_argument(
        "--max-header-bytes",
        help="largest request head, request line and headers together (64KiB); more gets "
        "431  [VIGIL_MAX_HEADER_BYTES]",
    )
    serve.add_argument(
        "--max-header-count",
        type=int,
        help="most header lines in a request (100); more gets 431  [VIGIL_MAX_HEADER_COUNT]",
    )
    serve.add_argument(
        "--header-timeout",
        type=float,
        help="seconds a request head may take to arrive, from the connection or its first "
        "byte (10); then 408 and the connection is closed  [VIGIL_HEADER_TIMEOUT]",
    )
    serve.add_argument(
        "--body-timeout",
        type=float,
        help="seconds a request body may take to arrive after its head (60); then 408  "
        "[VIGIL_BODY_TIMEOUT]",
    )
    serve.add_argument(
        "--keepalive-timeout",
        type=float,
        help="seconds an idle connection is kept open between requests (5)  "
        "[VIGIL_KEEPALIVE_TIMEOUT]",
    )
    serve.add_argument(
        "--max-connections",
        type=int,
        help="client connections served at once (1000); a request on one more gets 503  "
        "[VIGIL_MAX_CONNECTIONS]",
    )
    serve.add_argument(
        "--forwarded-allow-ips",
        help="comma-separated proxy addresses or CIDRs whose X-Forwarded-For and "
        "X-Forwarded-Proto are believed (default: none; '*' trusts every peer)  "
        "[VIGIL_FORWARDED_ALLOW_IPS]",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vigil", description="Vigil: observability-first model serving."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser(
        "serve", help="run the gateway (API, console, control plane) and local workers"
    )
    serve.add_argument("--host", help="address to listen on (127.0.0.1)  [VIGIL_HOST]")
    serve.add_argument("--port", type=int, help="port to listen on (8000)  [VIGIL_PORT]")
    serve.add_argument(
        "--data-dir", help="where the SQLite database lives (.vigil)  [VIGIL_DATA_DIR]"
    )
    serve.add_argument(
        "--database-url",
        help="SQLAlchemy URL of the control-plane database "
        "(default: SQLite in the data dir)  [VIGIL_DATABASE_URL]",
    )
    serve.add_argument(
        "--models",
        help="comma-separated bundled models to load "
        "(smollm2-135m-instruct,all-minilm-l6-v2)  [VIGIL_MODELS]",
    )
    serve.add_argument("--log-level", help="debug, info (default), warning  [VIGIL_LOG_LEVEL]")
    serve.add_argument(
        "--config",
        help="deployments file (TOML): caps, queues, SLO targets, "
        "fallbacks, long-prompt pools  [VIGIL_CONFIG]",
    )
    serve.add_argument(
        "--auth",
        choices=["open", "keys"],
        help="'keys' requires an API key on /v1 (default unless the host is "
        "loopback); 'open' is allowed on loopback only  [VIGIL_AUTH]",
    )
    serve.add_argument(
        "--sse-keepalive",
        type=float,
        help="seconds between SSE keep-alive comments while a stream waits (15)",
    )
    serve.add_argument(
        "--workers",
        type=int,
        help="worker processes to start on this machine (1); 0 waits for remote `vigil "
        "worker`s, which need the same VIGIL_WORKER_TOKEN  [VIGIL_WORKERS]",
    )
    serve.add_argument(
        "--routing",
        choices=["p2c", "round_robin"],
        help="replica choice: p2c (power of two choices by load, prefix affinity; "
        "default) or round_robin (a baseline for benchmarks)  [VIGIL_ROUTING]",
    )
    serve.add_argument(
        "--max-request-bytes",
        help="largest request body taken (8MiB); more gets 413  [VIGIL_MAX_REQUEST_BYTES]",
    )
    serve.add_argument(
        "--max-prompt-chars",
        type=int,
        help="most characters of prompt text in one request (2000000), checked before it is "
        "tokenized; more gets 400  [VIGIL_MAX_PROMPT_CHARS]",
    )
    serve.add_argument(
        "--model-dir",
        action="append",
        help="a directory the artifacts of versions registered over the admin API may come "
        "from; repeatable (default: DATA_DIR/models)  [VIGIL_MODEL_DIRS, ':'-separated]",
    )
    serve.add_argument(
        "--log-format", help="text (default) or json: one object per line  [VIGIL_LOG_FORMAT]"
    )
    serve.add_argument(
        "--drain-delay",
        type=float,
        help="on SIGTERM, seconds /readyz fails while new requests are still taken, so load "
        "balancers stop sending them (5)  [VIGIL_DRAIN_DELAY]",
    )
    serve.add_argument(
        "--drain-timeout",
        type=float,
        help="then, seconds running requests and streams may take to finish (60)  "
        "[VIGIL_DRAIN_TIMEOUT]",
    )
    serve.add_argument(
        "--otlp-endpoint",
        help="send request traces over OTLP/HTTP to this base URL, e.g. http://127.0.0.1:4318 "
        "(workers too)  [OTEL_EXPORTER_OTLP_ENDPOINT]",
    )
    serve.add_argument(
        "--trace-sample-ratio",
        type=float,
        help="share of traces kept when no trusted caller decided (1.0); failed, shed and "
        "over-SLO requests are always kept  [OTEL_TRACES_SAMPLER_ARG]",
    )
    serve.add_argument(
        "--trace-buffer",
        type=int,
        help="keep the last N traces in memory for /api/admin/traces (256 with "
        "--otlp-endpoint, else 0: tracing off)  [VIGIL_TRACE_BUFFER]",
    )
    serve.add_argument(
        "--trace-parent-from",
        action="append",
        metavar="HOST_OR_CIDR",
        help="callers whose W3C traceparent a request's trace joins (a proxy or mesh that "
        "starts traces); repeatable, or comma-separated. Anyone else's traceparent is kept "
        "as a link from a new trace (default: nobody's is joined)",
    )
    serve.add_argument(
        "--webhook-max-age",
        type=float,
        help="seconds an undelivered webhook message is retried, with back-off, before it is "
        "given up (86400)  [VIGIL_WEBHOOK_MAX_AGE]",
    )
    serve.add_argument(
        "--webhook-timeout",
        type=float,
        help="seconds one webhook delivery attempt may take in all: connecting, sending and "
        "reading the answer (10)",
    )
    serve.add_argument(
        "--webhook-allow",
        action="append",
        metavar="HOST_OR_CIDR",
        help="let webhooks call this host name or address/CIDR, which the address policy "
        "refuses by default (loopback, private, link-local, CGNAT, ...); repeatable (the "
        "variable: comma-separated)",
    )
    serve.add_argument(
        "--redis-url",
        help="Redis for state several gateways share (failed sign-ins), e.g. "
        "redis://127.0.0.1:6379; default: kept in this process  [VIGIL_REDIS_URL]",
    )
    serve.add_argument(
        "--console-session",
        type=int,
        help="seconds a console session lasts without a request (28800); every gateway "
        "behind one address needs the same VIGIL_CONSOLE_SECRET  [VIGIL_CONSOLE_SESSION]",
    )
    _add_engine_flags(serve)
    _add_edge_flags(serve)
    _name_variables(serve, SERVE_ENV | ENGINE_ENV)

    worker = sub.add_parser(
        "worker", help="run engines for a gateway (its token in VIGIL_WORKER_TOKEN)"
    )
    worker.add_argument(
        "--gateway",
        action="append",
        help="a gateway's base URL; give it once per gateway, or a comma-separated list: the "
        "worker registers with each  [VIGIL_GATEWAY]",
    )
    worker.add_argument(
        "--resolve-gateways",
        action="store_true",
        help="register with every address each --gateway host name resolves to, looked up "
        "every 5 s (a Kubernetes headless Service lists each gateway pod)",
    )
    worker.add_argument("--host", help="address to listen on (127.0.0.1)")
    worker.add_argument("--port", type=int, help="port to listen on (any free one)")
    worker.add_argument("--advertise-host", help="host the gateway should call, if not --host")
    worker.add_argument("--worker-id", help="a stable name (host-pid)  [VIGIL_WORKER_ID]")
    worker.add_argument(
        "--exit-with-parent", action="store_true", help="stop when the parent process ends"
    )
    worker.add_argument("--log-level", help="debug, info (default), warning")
    worker.add_argument("--log-format", help="text (default) or json  [VIGIL_LOG_FORMAT]")
    worker.add_argument(
        "--drain-timeout",
        type=float,
        help="on SIGTERM, seconds running requests may take to finish (60)  [VIGIL_DRAIN_TIMEOUT]",
    )
    worker.add_argument(
        "--otlp-endpoint",
        help="send this worker's spans over OTLP/HTTP  [OTEL_EXPORTER_OTLP_ENDPOINT]",
    )
    _add_engine_flags(worker)
    _name_variables(worker, WORKER_ENV | ENGINE_ENV)

    mig = sub.add_parser("migrate", help="move the database schema to a revision (head)")
    mig.add_argument("--database-url", help="SQLAlchemy URL  [VIGIL_DATABASE_URL]")
    mig.add_argument("--data-dir", help="data dir of the default SQLite database")
    mig.add_argument("--revision", default="head", help="target revision; 'base' empties it")

    keys = sub.add_parser("keys", help="create, list and revoke API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    create = keys_sub.add_parser("create", help="create a key and print it, once")
    create.add_argument("--name", required=True, help="who or what uses the key (unique)")
    create.add_argument(
        "--priority",
        choices=[p.label for p in Priority],
        default="interactive",
        help="the key's request class (interactive)",
    )
    create.add_argument("--models", help="comma-separated deployments it may use (all)")
    create.add_argument("--rate-limit", type=int, help="most requests per minute (no limit)")
    keys_list = keys_sub.add_parser("list", help="list the keys (never the keys themselves)")
    revoke = keys_sub.add_parser("revoke", help="revoke a key; it stops working within seconds")
    revoke.add_argument("name", help="the key's name")
    for p in (create, keys_list, revoke):
        p.add_argument("--database-url", help="SQLAlchemy URL  [VIGIL_DATABASE_URL]")
        p.add_argument("--data-dir", help="data dir of the default SQLite database")

    admin = sub.add_parser("admin", help="manage the users of the console and the admin API")
    admin_sub = admin.add_subparsers(dest="admin_command", required=True, metavar="ACTION")
    user = admin_sub.add_parser("create", help="create a user (the first admin, typically)")
    user.add_argument("--username", required=True, help="the name to sign in with")
    user.add_argument(
        "--role",
        choices=["admin", "operator", "viewer"],
        default="admin",
        help="admin (default): everything; operator: deploy and tune; viewer: read",
    )
    user.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from the first line of standard input instead of a prompt",
    )
    user.add_argument("--database-url", help="SQLAlchemy URL  [VIGIL_DATABASE_URL]")
    user.add_argument("--data-dir", help="data dir of the default SQLite database")
    _add_plan_parser(sub)
    return parser


def _add_plan_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    plan = sub.add_parser(
        "plan",
        help="workers needed for a load, from a running gateway's measured step costs",
        description="Asks a running gateway (POST /api/admin/plan, as a Vigil user of any "
        "role) how many workers the deployment needs for the load, with the predicted TTFT "
        "p99 and tokens/s per stream and the resource that binds. Lengths: 200 (fixed), "
        "40,200,1000 (a list drawn from), or mean=200,p99=800 (log-normal). Exits 1 when "
        "no number of workers meets the target, 2 when no plan could be made.",
    )
    plan.add_argument("--deployment", required=True, help="the deployment (`model`) to plan")
    plan.add_argument("--rps", type=float, required=True, help="requests per second")
    plan.add_argument("--prompt-tokens", required=True, help="prompt lengths, in tokens")
    plan.add_argument("--output-tokens", required=True, help="output lengths, in tokens")
    plan.add_argument("--ttft-p99", type=float, help="TTFT p99 target, s (the deployment's SLO)")
    plan.add_argument(
        "--min-tokens-per-s", type=float, help="per-stream tokens/s target (the deployment's SLO)"
    )
    plan.add_argument(
        "--gateway", default="http://127.0.0.1:8000", help="the gateway's base URL (%(default)s)"
    )
    plan.add_argument("--user", required=True, help="a Vigil user (a viewer is enough)")
    plan.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from the first line of standard input instead of a prompt",
    )
    plan.add_argument("--seed", type=int, default=0, help="the simulation's seed (0)")
    plan.add_argument("--json", action="store_true", help="print the admin API's answer")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "migrate":
            return _migrate(args)
        if args.command == "keys":
            return _keys(args)
        if args.command == "admin":
            return _admin(args)
        if args.command == "worker":
            return _worker(args)
        if args.command == "plan":
            return _plan(args)
    except SettingsError as exc:
        print(f"vigil: {exc}", file=sys.stderr)
        return 2
    raise AssertionError(f"unhandled command {args.command}")


def _migrate(args: argparse.Namespace) -> int:
    from vigil.platform.control.migrate import current_revision, migrate

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    url = database_url(args.database_url, args.data_dir)
    _make_sqlite_dir(url)
    migrate(url, args.revision)
    print(f"database at revision {current_revision(url) or 'base (empty)'}")
    return 0


def _make_sqlite_dir(url: str, say_if_new: bool = False) -> None:
    """SQLite creates the database file, not the folder it lies in. `say_if_new`: a
    command that manages a server's users or keys says when it finds no database where it
    looked (run elsewhere, it would otherwise write to a new, empty one unseen)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        path = Path(parsed.database)
        if say_if_new and not path.exists():
            print(
                f"vigil: no database at {path}: a new, empty one is made there. A server "
                "uses the one in its own data dir: run this in the folder `vigil serve` runs "
                "in, or pass the same --data-dir (or --database-url).",
                file=sys.stderr,
            )
        path.parent.mkdir(parents=True, exist_ok=True)


def _keys(args: argparse.Namespace) -> int:
    from vigil.platform.control.migrate import migrate
    from vigil.platform.errors import VigilError

    url = database_url(args.database_url, args.data_dir)
    _make_sqlite_dir(url, say_if_new=True)
    migrate(url)
    try:
        return asyncio.run(_run_keys_command(url, args))
    except VigilError as exc:
        print(f"vigil: {exc.message}", file=sys.stderr)
        return 2


async def _run_keys_command(url: str, args: argparse.Namespace) -> int:
    from vigil.platform.control.access.keys import ApiKeyService
    from vigil.platform.control.changes import ChangeFeed
    from vigil.platform.control.db import create_engine, session_factory

    engine = create_engine(url)
    try:
        # Gateways on the same PostgreSQL hear of a revoke at once (control/changes.py).
        service = ApiKeyService(session_factory(engine), ChangeFeed(engine).announce)
        if args.keys_command == "create":
            models = args.models.split(",") if args.models is not None else None
            priority = Priority.from_label(args.priority)
            assert priority is not None, "argparse admits class labels only"
            record, plaintext = await service.create(
                args.name, priority, models, args.rate_limit, actor="cli"
            )
            print(plaintext)
            print(
                f"created API key {record.name!r} ({_describe(record)}); copy the key now: "
                "it will not be shown again (only its hash is stored)",
                file=sys.stderr,
            )
        elif args.keys_command == "list":
            print(_key_table(await service.list()))
        elif args.keys_command == "revoke":
            record = await service.revoke(args.name, actor="cli")
            print(f"revoked API key {record.name!r} ({record.key_prefix}...)")
        else:
            raise AssertionError(f"unhandled keys command {args.keys_command}")
    finally:
        await engine.dispose()
    return 0


def _admin(args: argparse.Namespace) -> int:
    from vigil.platform.control.migrate import migrate
    from vigil.platform.errors import VigilError

    try:
        password = _read_password(args.password_stdin)
    except ValueError as exc:
        print(f"vigil: {exc}", file=sys.stderr)
        return 2
    url = database_url(args.database_url, args.data_dir)
    _make_sqlite_dir(url, say_if_new=True)
    migrate(url)
    try:
        return asyncio.run(_create_user(url, args.username, password, args.role))
    except VigilError as exc:
        print(f"vigil: {exc.message}", file=sys.stderr)
        return 2


def _plan(args: argparse.Namespace) -> int:
    from vigil.platform.planning.command import PlanCommandError, length_spec, run

    try:
        body = {
            "deployment": args.deployment,
            "rps": args.rps,
            "prompt_tokens": length_spec(args.prompt_tokens),
            "output_tokens": length_spec(args.output_tokens),
            "ttft_p99_s": args.ttft_p99,
            "min_tokens_per_s": args.min_tokens_per_s,
            "seed": args.seed,
        }
        password = _read_password(args.password_stdin, confirm=False)
        text, met = run(args.gateway, args.user, password, body, args.json)
    except PlanCommandError as exc:
        print(f"vigil: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0 if met else 1


def _read_password(from_stdin: bool, confirm: bool = True) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    import getpass

    password = getpass.getpass("Password: ")
    if confirm and getpass.getpass("Password again: ") != password:
        raise ValueError("the two passwords differ; nothing was created")
    return password


async def _create_user(url: str, username: str, password: str, role: str) -> int:
    from vigil.platform.control.access.records import Role
    from vigil.platform.control.access.users import UserService
    from vigil.platform.control.db import create_engine, session_factory

    engine = create_engine(url)
    try:
        users = UserService(session_factory(engine))
        user = await users.create(username, password, Role(role), actor="cli")
    finally:
        await engine.dispose()
    print(f"created {user.role} {user.username!r}; sign in to the console or the admin API")
    return 0


def _describe(record: ApiKeyRecord) -> str:
    models = ",".join(sorted(record.models)) if record.models is not None else "all"
    limit = record.rate_limit_per_minute
    rate = f"{limit}/min" if limit is not None else "no rate limit"
    return f"{record.priority.label}, models {models}, {rate}"


def _key_table(records: Sequence[ApiKeyRecord]) -> str:
    if not records:
        return "no API keys (create one with `vigil keys create --name NAME`)"
    header = ("NAME", "PREFIX", "PRIORITY", "MODELS", "RATE/MIN", "CREATED", "REVOKED")
    rows = [header] + [
        (
            r.name,
            r.key_prefix + "...",
            r.priority.label,
            ",".join(sorted(r.models)) if r.models is not None else "all",
            str(r.rate_limit_per_minute) if r.rate_limit_per_minute is not None else "-",
            _utc(r.created_at),
            _utc(r.revoked_at) if r.revoked_at is not None else "-",
        )
        for r in records
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _utc(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from vigil.platform.api.http_protocol import guarded_protocol
    from vigil.platform.app import create_app
    from vigil.platform.control.migrate import migrate
    from vigil.platform.lifecycle import DrainingServer
    from vigil.platform.services import build_services
    from vigil.platform.settings import engine_env, local_worker_engine, trace_env
    from vigil.platform.telemetry.context import configure_logging
    from vigil.platform.worker.supervisor import LocalWorkers

    settings = serve_settings(vars(args))
    configure_logging(settings.log_level, settings.log_format)
    _quiet_logs()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrate(settings.resolved_database_url)
    token = settings.worker_token or secrets.token_urlsafe(32)
    local = None
    if settings.workers:
        cpus = os.cpu_count() or 1
        host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
        env = {
            **engine_env(local_worker_engine(settings.engine, settings.workers, cpus)),
            "VIGIL_WORKER_TOKEN": token,
            "VIGIL_LOG_LEVEL": settings.log_level,
            "VIGIL_LOG_FORMAT": settings.log_format,
            **trace_env(settings.tracing),
        }
        local = LocalWorkers(settings.workers, f"http://{host}:{settings.port}", env)
    services = build_services(settings, token)
    app = create_app(services, local)
    if settings.auth == "open":
        log.warning(
            "auth is open: /v1 takes requests without an API key. That is allowed on a "
            "loopback host only (%s); anyone on this machine can call it. Use --auth keys and "
            "`vigil keys create` to require keys.",
            settings.host,
        )
    else:
        log.info("auth: every /v1 request needs an API key (vigil keys create)")
    log.info("console: http://%s:%d/console/", settings.host, settings.port)
    edge = settings.edge
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=int(settings.drain_timeout_s),
        http=guarded_protocol(edge),
        timeout_keep_alive=edge.keepalive_timeout_s,  # type: ignore[arg-type]
        # uvicorn refuses when its count (this connection included) reaches the limit.
        limit_concurrency=edge.max_connections + 1,
        # Forwarded headers are believed from the listed proxies only; by default from
        # no one, so that no client can choose the address it is throttled by.
        proxy_headers=bool(edge.forwarded_allow_ips),
        forwarded_allow_ips=list(edge.forwarded_allow_ips) or None,
        access_log=False,  # vigil.access writes the one access line (api/observe.py)
    )

    def begin() -> None:
        services.draining = True  # /readyz fails from now on
        if local is not None:
            local.stopping()  # the SIGTERM of a process group reaches the workers too

    async def drain() -> None:
        await asyncio.sleep(settings.drain_delay_s)

    DrainingServer(config, begin, drain).run()
    return 0


def _quiet_logs() -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _worker(args: argparse.Namespace) -> int:
    from vigil.platform.settings import worker_settings
    from vigil.platform.telemetry.context import configure_logging
    from vigil.platform.worker.server import run_worker

    settings = worker_settings(vars(args))
    prefix = f"worker {settings.worker_id} "
    configure_logging(settings.log_level, settings.log_format, prefix, worker=settings.worker_id)
    _quiet_logs()
    run_worker(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
