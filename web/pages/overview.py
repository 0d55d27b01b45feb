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
from typing import Any

from litestar import Controller, Request, get
from litestar.response import ServerSentEvent, ServerSentEventMessage, Template

from vigil.web.deps import Numbers, Plane
from vigil.web.render import render

STREAM_INTERVAL_S = 1.0


class ConsoleController(Controller):
    path = "/"

    @get("/")
    async def overview(
        self, request: Request[Any, Any, Any], plane: Plane, numbers: Numbers
    ) -> Template:
        versions = await plane.versions.list_versions()
        return render(
            request,
            "console/index.html",
            area="overview",
            **numbers.stats(),
            versions=versions,
            deployment_names=numbers.deployment_names,
            history=numbers.history(),
        )

    @get("/overview/versions")
    async def versions(self, request: Request[Any, Any, Any], plane: Plane) -> Template:
        """The versions table again (it redraws itself every 5 s)."""
        versions = await plane.versions.list_versions()
        return render(request, "console/_versions.html", versions=versions)

    @get("/stream", opt={"stream": True})
    async def stream(self, request: Request[Any, Any, Any], numbers: Numbers) -> ServerSentEvent:
        template = request.app.template_engine.get_template("console/_stats.html")  # type: ignore[union-attr]

        async def events() -> AsyncIterator[ServerSentEventMessage]:
            while True:
                html = template.render(**numbers.stats())
                yield ServerSentEventMessage(data=html, event="stats")
                await asyncio.sleep(STREAM_INTERVAL_S)

        return ServerSentEvent(events())
