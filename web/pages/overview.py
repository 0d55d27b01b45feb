"""The console's overview: live numbers and, per deployment, live charts (the last 15
minutes, one point a second) over Server-Sent Events.

The page includes its fragments; the stream re-renders the stats fragment once a
second and htmx swaps it in place (htmx-ext-sse), so a number on screen is never more
than a second old. The fragment carries each deployment's newest point as JSON, which
live.js appends to its charts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

from litestar import Controller, Request, get
from litestar.response import ServerSentEvent, ServerSentEventMessage, Template

from vigil.platform.gateway.readiness import version_error, version_states
from vigil.platform.services import Services
from vigil.web.render import render

STREAM_INTERVAL_S = 1.0


def _stats_context(services: Services) -> dict[str, Any]:
    view, tokenizers = services.view, services.tokenizers
    point = services.live.latest()
    latest = {name: services.series.latest(name) for name in view.deployments}
    return {
        "point": point,
        "points": {name: asdict(p) if p else None for name, p in latest.items()},
        "models": [
            {"name": key, "state": state.value, "error": version_error(view, tokenizers, key)}
            for key, state in version_states(view, tokenizers).items()
        ],
    }


class ConsoleController(Controller):
    path = "/"

    @get("/")
    async def overview(self, request: Request[Any, Any, Any], services: Services) -> Template:
        versions = await services.plane.versions.list_versions()
        return render(
            request,
            "console/index.html",
            area="overview",
            **_stats_context(services),
            versions=versions,
            deployment_names=list(services.view.deployments),
            history={
                name: [asdict(p) for p in services.series.points(name)]
                for name in services.view.deployments
            },
        )

    @get("/overview/versions")
    async def versions(self, request: Request[Any, Any, Any], services: Services) -> Template:
        """The versions table again (it redraws itself every 5 s)."""
        versions = await services.plane.versions.list_versions()
        return render(request, "console/_versions.html", versions=versions)

    @get("/stream", opt={"stream": True})
    async def stream(self, request: Request[Any, Any, Any], services: Services) -> ServerSentEvent:
        template = request.app.template_engine.get_template("console/_stats.html")  # type: ignore[union-attr]

        async def events() -> AsyncIterator[ServerSentEventMessage]:
            while True:
                html = template.render(**_stats_context(services))
                yield ServerSentEventMessage(data=html, event="stats")
                await asyncio.sleep(STREAM_INTERVAL_S)

        return ServerSentEvent(events())
