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
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.template import TemplateConfig

import vigil.web
from vigil.platform.api.health import healthz, metrics, readyz
from vigil.platform.api.openai_routes import OpenAIController
from vigil.platform.api.request_id import add_request_id
from vigil.platform.control.model_versions import ModelVersionService, VersionStatus
from vigil.platform.errors import EXCEPTION_HANDLERS
from vigil.platform.gateway.auth import Principal
from vigil.platform.services import Services, live_gauges
from vigil.platform.worker.local import ModelState, ModelStateChange
from vigil.web.console import ConsoleController

log = logging.getLogger(__name__)

LIVE_SAMPLE_INTERVAL_S = 1.0


async def _sample_live(services: Services) -> None:
    while True:
        services.live.sample(live_gauges(services.models))
        await asyncio.sleep(LIVE_SAMPLE_INTERVAL_S)


def _version_recorder(versions: ModelVersionService):  # type: ignore[no-untyped-def]
    status = {
        ModelState.LOADING: VersionStatus.LOADING,
        ModelState.READY: VersionStatus.READY,
        ModelState.FAILED: VersionStatus.FAILED,
    }

    async def record(change: ModelStateChange) -> None:
        s = change.source
        try:
            await versions.record(
                model=s.name,
                version=s.version,
                kind=s.kind.value,
                format=s.format.value,
                source=str(s.path),
                status=status[change.state],
                error=change.error,
            )
        except Exception:  # the model still serves when the database is unreachable
            log.exception("could not record the state of %s", s.name)

    return record


def _principal(services: Services):  # type: ignore[no-untyped-def]
    async def principal(request: Request[Any, Any, Any]) -> Principal:
        headers = request.headers
        return await services.auth.authenticate(
            headers.get("authorization"), headers.get("x-vigil-priority")
        )

    return principal


def create_app(services: Services) -> Litestar:
    @contextlib.asynccontextmanager
    async def lifespan(_: Litestar) -> AsyncIterator[None]:
        loading = await services.worker.start(_version_recorder(services.versions))
        sampler = asyncio.create_task(_sample_live(services), name="live-sampler")
        try:
            yield
        finally:
            for task in (loading, sampler):
                task.cancel()
            await asyncio.gather(loading, sampler, return_exceptions=True)
            services.worker.stop()
            await services.db.dispose()

    web_dir = Path(vigil.web.__file__).parent
    return Litestar(
        route_handlers=[
            OpenAIController,
            ConsoleController,
            healthz,
            readyz,
            metrics,
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
            "worker": Provide(lambda: services.worker, sync_to_thread=False),
            "registry": Provide(lambda: services.registry, sync_to_thread=False),
        },
        exception_handlers=EXCEPTION_HANDLERS,
        before_send=[add_request_id],
        template_config=TemplateConfig(directory=web_dir / "templates", engine=JinjaTemplateEngine),
        openapi_config=OpenAPIConfig(title="Vigil", version="0.1.0", path="/schema"),
        lifespan=[lifespan],
        logging_config=None,  # the CLI configures logging once for every part
    )
