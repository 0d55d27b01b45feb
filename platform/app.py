"""Wires the parts into one Litestar application (built at start-up, never at import)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from litestar import Litestar, Request
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.template import TemplateConfig

import vigil.web
from vigil.platform.api.admin import ADMIN_OPENAPI_COMPONENTS, admin_router
from vigil.platform.api.body import BodyRequest
from vigil.platform.api.health import healthz, metrics, readyz
from vigil.platform.api.internal import WorkerController
from vigil.platform.api.observe import observe_requests
from vigil.platform.api.openai_routes import OpenAIController
from vigil.platform.api.request_id import add_request_id
from vigil.platform.api.runbooks import runbook
from vigil.platform.api.security_headers import secure_answers
from vigil.platform.gateway.auth import Principal
from vigil.platform.gateway.fleet import REPLICA_WRITE_S
from vigil.platform.gateway.workers import HEARTBEAT_TIMEOUT_S
from vigil.platform.planning.service import PlanService
from vigil.platform.services import Services, live_gauges, sample_deployments
from vigil.platform.wire.errors import EXCEPTION_HANDLERS
from vigil.platform.worker.supervisor import LocalWorkers
from vigil.web.router import console_router, console_stores

log = logging.getLogger(__name__)

# The API docs at /schema, from assets served here (no CDN: they work offline too).
API_DOCS = SwaggerRenderPlugin(
    js_url="/static/vendor/swagger-ui-bundle.js",
    css_url="/static/vendor/swagger-ui.css",
    standalone_preset_js_url="/static/vendor/swagger-ui-standalone-preset.js",
    path="/",
    favicon="",
)

LIVE_SAMPLE_INTERVAL_S = 1.0
VIEW_RELOAD_EVERY = 5  # samples
SESSION_PURGE_EVERY = 300  # samples: expired console sessions deleted every 5 minutes
SLO_INTERVAL_S = 1.0


async def _sample_live(services: Services) -> None:
    """Once a second: a point for the console; every VIEW_RELOAD_S, the serving view again
    (another gateway on the same database may have changed it) and the replicas that
    went silent marked down."""
    n = 0
    while True:
        services.live.sample(live_gauges(services.workers))
        sample_deployments(services)
        n += 1
        if n % VIEW_RELOAD_EVERY == 0:
            try:
                await services.reload_serving_view()
                # A live worker's row is written only every REPLICA_WRITE_S: older than
                # that plus the heartbeat timeout is silence, not the gap between writes.
                silent_s = REPLICA_WRITE_S + HEARTBEAT_TIMEOUT_S
                await services.plane.replicas.mark_silent_down(silent_s)
            except Exception:  # serving goes on with the view it has
                log.exception("could not reload the serving view")
        if n % SESSION_PURGE_EVERY == 0:
            try:
                await services.plane.sessions.purge_expired()
            except Exception:  # they are refused when read anyway
                log.exception("could not delete expired console sessions")
        await asyncio.sleep(LIVE_SAMPLE_INTERVAL_S)


async def _watch_slos(services: Services) -> None:
    """Once a second, on the gateway that owns the loops: the SLO loop's alerts, actions
    and canary checks."""
    while True:
        try:
            if services.loops.is_owner:
                await services.slo_loop.tick()
        except Exception:  # the next tick tries again
            log.exception("the SLO loop failed")
        await asyncio.sleep(SLO_INTERVAL_S)


def _principal(services: Services):  # type: ignore[no-untyped-def]
    async def principal(request: Request[Any, Any, Any]) -> Principal:
        headers = request.headers
        return await services.auth.authenticate(
            headers.get("authorization"), headers.get("x-vigil-priority")
        )

    return principal


def create_app(services: Services, local_workers: LocalWorkers | None = None) -> Litestar:
    """The gateway: API, console and the workers' meeting point. `local_workers`, when
    given, are started with it and stopped with it."""

    @contextlib.asynccontextmanager
    async def lifespan(_: Litestar) -> AsyncIterator[None]:
        await services.load_serving_view()
        services.plane.add_listener(services.changes.announce)  # other gateways first
        services.plane.add_listener(services.on_control_change)
        if services.loops.is_owner:  # SQLite: always; PostgreSQL: once the lock is taken
            await services.slo_loop.start()
        owner = services.loops
        tasks = [
            asyncio.create_task(_sample_live(services), name="live-sampler"),
            asyncio.create_task(services.changes.run(services.on_control_change), name="changes"),
            asyncio.create_task(services.loops.run(services.on_loop_owner), name="loop-owner"),
            asyncio.create_task(_watch_slos(services), name="slo-loop"),
            asyncio.create_task(
                services.delivery.run(lambda: owner.is_owner), name="webhook-delivery"
            ),
        ]
        if local_workers is not None:
            local_workers.start()
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await services.generation.shadows.close()
            if services.tracing is not None:
                await asyncio.to_thread(services.tracing.shutdown)
            if local_workers is not None:
                await local_workers.stop()
            await services.http.aclose()
            await services.delivery.client.aclose()
            await services.db.dispose()

    web_dir = Path(vigil.web.__file__).parent
    return Litestar(
        route_handlers=[
            OpenAIController,
            console_router(services),
            WorkerController,
            admin_router(
                services.plane,
                services.sign_ins,
                services.slos,
                services.tracing.ring if services.tracing else None,
                PlanService(services.view),
            ),
            healthz,
            readyz,
            metrics,
            runbook,
            create_static_files_router(
                path="/static", directories=[web_dir / "static"], include_in_schema=False
            ),
        ],
        dependencies={
            "services": Provide(lambda: services, sync_to_thread=False),
            "settings": Provide(lambda: services.settings, sync_to_thread=False),
            "principal": Provide(_principal(services)),
            "generation": Provide(lambda: services.generation, sync_to_thread=False),
            "embedding": Provide(lambda: services.embedding, sync_to_thread=False),
            "view": Provide(lambda: services.view, sync_to_thread=False),
            "registry": Provide(lambda: services.registry, sync_to_thread=False),
        },
        exception_handlers=EXCEPTION_HANDLERS,
        request_class=BodyRequest,  # one JSON decoder for every route
        request_max_body_size=services.settings.max_request_bytes,
        before_send=[add_request_id],
        middleware=[observe_requests(services.tracing), secure_answers],
        template_config=TemplateConfig(directory=web_dir / "templates", engine=JinjaTemplateEngine),
        openapi_config=OpenAPIConfig(
            title="Vigil",
            version="0.1.0",
            path="/schema",
            components=[ADMIN_OPENAPI_COMPONENTS],
            render_plugins=[API_DOCS],
        ),
        stores=console_stores(services),
        lifespan=[lifespan],
        logging_config=None,  # the CLI configures logging once for every part
    )
