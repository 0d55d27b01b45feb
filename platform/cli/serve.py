"""`vigil serve`: the gateway (API, console, control plane) and its local workers."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import sys
from dataclasses import replace

from vigil.platform.cli.flags import Subparsers, add_settings
from vigil.platform.settings import local_worker_settings, serve_settings
from vigil.platform.settings.table import Command

log = logging.getLogger("vigil")


def add_parser(sub: Subparsers) -> None:
    serve = sub.add_parser(
        "serve", help="run the gateway (API, console, control plane) and local workers"
    )
    serve.add_argument(
        "models",
        nargs="*",
        metavar="MODEL",
        help="a model to serve: a bundled name (smollm2-135m-instruct, all-minilm-l6-v2), a "
        ".gguf file, a Hugging Face folder (config.json, *.safetensors, tokenizer.json; a "
        "sentence-transformers folder embeds), or NAME=PATH; each served as a deployment "
        "named after the file or folder, or NAME. None: VIGIL_MODELS, else the bundled "
        "models",
    )
    add_settings(serve, Command.SERVE)
    serve.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from vigil.platform.alerts.links import public_base_url
    from vigil.platform.api.http_protocol import guarded_protocol
    from vigil.platform.app import create_app
    from vigil.platform.control.migrate import migrate
    from vigil.platform.control.versions.local import model_args
    from vigil.platform.errors import VigilError
    from vigil.platform.lifecycle import DrainingServer
    from vigil.platform.services import build_services
    from vigil.platform.telemetry.context import configure_logging
    from vigil.platform.worker.supervisor import LocalWorkers

    settings = serve_settings(vars(args))
    if args.models:
        settings = replace(settings, models=tuple(args.models))
    configure_logging(settings.log_level, settings.log_format)
    try:
        model_args(settings.models)  # before any worker starts: the files are read later
    except ValueError as exc:
        print(f"vigil serve: {exc}", file=sys.stderr)
        return 2
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrate(settings.resolved_database_url)
    token = settings.worker_token or secrets.token_urlsafe(32)
    local = None
    if settings.workers:
        workers = local_worker_settings(settings, token, os.cpu_count() or 1)
        local = LocalWorkers(settings.workers, workers)
    services = build_services(settings, token)
    app = create_app(services, local)
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

    server = DrainingServer(config, begin, drain)

    async def main() -> int:
        # The start-up declarations (bundled models, models given by path, the
        # deployments file) before the server listens: a mistake in them is one line
        # that says what to fix, and nothing is served.
        try:
            await services.plane.declare(list(settings.models), settings.config_path)
        except (ValueError, OSError, VigilError) as exc:
            print(f"vigil serve: {exc}", file=sys.stderr)
            await services.db.dispose()
            return 2
        if settings.auth == "open":
            log.warning(
                "auth is open: /v1 takes requests without an API key. That is allowed on a "
                "loopback host only (%s); anyone on this machine can call it. Use --auth keys and "
                "`vigil keys create` to require keys.",
                settings.host,
            )
        else:
            log.info("auth: every /v1 request needs an API key (vigil keys create)")
        log.info(
            "console: %s/console/",
            public_base_url(settings.external_url, settings.host, settings.port),
        )
        await server.serve()
        return 0

    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        return runner.run(main())
