"""`vigil`: the command line. Each subcommand composes its settings once and runs."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from vigil.platform.settings import SettingsError, database_url, serve_settings

log = logging.getLogger("vigil")


def _add_engine_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("engine")
    g.add_argument("--device", help="auto (default), cpu, cuda or cuda:N  [VIGIL_DEVICE]")
    g.add_argument(
        "--dtype",
        help="auto (default: float32 on CPU, bfloat16 on CUDA), float32, "
        "bfloat16, float16  [VIGIL_DTYPE]",
    )
    g.add_argument(
        "--torch-threads",
        type=int,
        help="CPU threads for torch (default: CPU count - 1)  [VIGIL_TORCH_THREADS]",
    )
    g.add_argument("--block-size", type=int, help="tokens per KV cache block (16)")
    g.add_argument(
        "--kv-cache-memory",
        help="KV cache size: bytes (e.g. 1GiB, the CPU default) or a fraction of the memory "
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vigil", description="Vigil: observability-first model serving."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the API, the console and a worker in one process")
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
    _add_engine_flags(serve)

    mig = sub.add_parser("migrate", help="move the database schema to a revision (head)")
    mig.add_argument("--database-url", help="SQLAlchemy URL  [VIGIL_DATABASE_URL]")
    mig.add_argument("--data-dir", help="data dir of the default SQLite database")
    mig.add_argument("--revision", default="head", help="target revision; 'base' empties it")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "migrate":
            return _migrate(args)
    except SettingsError as exc:
        print(f"vigil: {exc}", file=sys.stderr)
        return 2
    raise AssertionError(f"unhandled command {args.command}")


def _migrate(args: argparse.Namespace) -> int:
    from vigil.platform.control.migrate import current_revision, migrate

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    url = database_url(args.database_url, args.data_dir)
    migrate(url, args.revision)
    print(f"database at revision {current_revision(url) or 'base (empty)'}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from vigil.platform.app import create_app
    from vigil.platform.control.migrate import migrate
    from vigil.platform.services import build_services
    from vigil.platform.worker.local import configure_torch

    settings = serve_settings(vars(args))
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrate(settings.resolved_database_url)
    configure_torch(settings.engine)
    app = create_app(build_services(settings))
    if settings.host in ("127.0.0.1", "localhost", "::1"):
        log.info(
            "listening on localhost only, with no API keys: anyone on this machine can call it"
        )
    log.info("console: http://%s:%d/console/", settings.host, settings.port)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=5,
    )
    uvicorn.Server(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
