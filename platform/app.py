"""Wires the parts into one Litestar application (built at start-up, never at import)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
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
from vigil.platform.planning.service import PlanService
from vigil.platform.services import Services
from vigil.platform.wire.errors import EXCEPTION_HANDLERS
from vigil.platform.worker.supervisor import LocalWorkers
from vigil.web.router import console_router, console_stores

# The API docs at /schema, from assets served here (no CDN: they work offline too).
API_DOCS = SwaggerRenderPlugin(
    js_url="/static/vendor/swagger-ui-bundle.js",
    css_url="/static/vendor/swagger-ui.css",
    standalone_preset_js_url="/static/vendor/swagger-ui-standalone-preset.js",
    path="/",
    favicon="",
)


def _principal(services: Services):  # type: ignore[no-untyped-def]
    async def principal(request: Request[Any, Any, Any]) -> Principal:
        headers = request.headers
        return await services.auth.authenticate(
            headers.get("authorization"), headers.get("x-vigil-priority")
        )

    return principal


def _dependencies(services: Services) -> dict[str, Provide]:
    """What the API's handlers are handed, each by name, read from the gateway's parts
    when a request asks for it."""
    parts: dict[str, Callable[[], Any]] = {
        "settings": lambda: services.settings,
        "generation": lambda: services.generation,
        "embedding": lambda: services.embedding,
        "view": lambda: services.view,
        "tokenizers": lambda: services.tokenizers,
        "workers": lambda: services.workers,
        "fleet": lambda: services.fleet,
        "worker_token": lambda: services.worker_token,
        "counts": lambda: services.sign_ins.counts,
        "draining": lambda: services.draining,
        "registry": lambda: services.registry,
    }
    return {
        "principal": Provide(_principal(services)),
        **{name: Provide(part, sync_to_thread=False) for name, part in parts.items()},
    }


def create_app(services: Services, local_workers: LocalWorkers | None = None) -> Litestar:
    """The gateway: API, console and the workers' meeting point. `local_workers`, when
    given, are started with it and stopped with it. The start-up declarations
    (`ControlPlane.declare`) are made before it starts, by whoever starts it."""

    @contextlib.asynccontextmanager
    async def lifespan(_: Litestar) -> AsyncIterator[None]:
        await services.serving.reload()
        await services.loops.start()
        if local_workers is not None:
            local_workers.start()
        try:
            yield
        finally:
            await services.loops.stop()
            await services.generation.shadows.close()
            if services.tracing is not None:
                await asyncio.to_thread(services.tracing.shutdown)
            if local_workers is not None:
                await local_workers.stop()
            await services.http.aclose()
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
        dependencies=_dependencies(services),
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
