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
from datetime import UTC, datetime, timedelta
from typing import Any

from litestar import Controller, Request, get
from litestar.response import ServerSentEvent, ServerSentEventMessage, Template

from vigil.platform.telemetry.trace_query import TraceSummary, slowest
from vigil.platform.telemetry.tracing import TraceRing
from vigil.web.deps import Numbers, Plane, Traces
from vigil.web.render import render

STREAM_INTERVAL_S = 1.0
EXEMPLARS = 3  # per deployment: its slowest kept requests of the charts' 15 minutes
CHART_WINDOW_S = 15 * 60


def exemplars(ring: TraceRing | None, names: list[str]) -> dict[str, list[TraceSummary]]:
    if ring is None:
        return {}
    since = datetime.now(UTC) - timedelta(seconds=CHART_WINDOW_S)
    return {name: slowest(ring, name, since, EXEMPLARS) for name in names}


class ConsoleController(Controller):
    path = "/"

    @get("/")
    async def overview(
        self, request: Request[Any, Any, Any], plane: Plane, numbers: Numbers, traces: Traces
    ) -> Template:
        versions = await plane.versions.list_versions()
        names = numbers.deployment_names
        return render(
            request,
            "console/index.html",
            area="overview",
            **numbers.stats(),
            versions=versions,
            deployment_names=names,
            history=numbers.history(),
            exemplars=exemplars(traces, names),
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
