"""Traces: the kept traces (the gateway's ring, `--trace-buffer`), filtered as
`GET /api/admin/traces` is (platform/telemetry/trace_query.py), each opening a waterfall
of its spans (web/waterfall.py); and a lookup by the x-request-id a caller reports."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template

from vigil.platform.errors import InvalidRequest, NotFound
from vigil.platform.telemetry.trace_query import OUTCOMES, parse_query, search
from vigil.platform.telemetry.tracing import TraceRing
from vigil.web.deps import Plane, Traces
from vigil.web.render import is_htmx, render
from vigil.web.waterfall import waterfall

FILTERS = ("deployment", "version", "outcome", "min_duration_ms", "since", "until", "request_id")


def _ring(traces: TraceRing | None) -> TraceRing:
    if traces is None:
        raise NotFound(
            "Tracing is off: this server was started with --trace-buffer 0; start it with "
            "--trace-buffer N (the default, 256) to keep traces here.",
            code="tracing_off",
        )
    return traces


def trace_link(trace_id: str) -> str:
    return f"/console/traces/{trace_id}"


class TracesController(Controller):
    path = "/traces"

    @get("/")
    async def index(
        self, request: Request[Any, Any, Any], plane: Plane, traces: Traces
    ) -> Template:
        ring = _ring(traces)
        params = dict(request.query_params.items())
        query = parse_query(params)
        found = search(ring, query)
        chosen = {name: params.get(name, "") for name in FILTERS}
        if is_htmx(request):
            return render(request, "traces/_rows.html", traces=found, query=query)
        names = [d.name for d in await plane.deployments.list()]
        return render(
            request,
            "traces/index.html",
            area="traces",
            traces=found,
            query=query,
            chosen=chosen,
            deployments=names,
            outcomes=OUTCOMES,
            capacity=ring.capacity,
        )

    @get("/lookup")
    async def lookup(self, traces: Traces, request_id: FromQuery[str | None] = None) -> Redirect:
        """The trace of the request whose x-request-id a caller reported."""
        wanted = (request_id or "").strip()
        if not wanted:
            raise InvalidRequest(
                "Enter a request id: the x-request-id header of the response, e.g. "
                "chatcmpl-... or req-....",
                param="request_id",
            )
        ring = _ring(traces)
        found = search(ring, parse_query({"request_id": wanted, "limit": "1"}))
        if not found:
            raise NotFound(
                f"No kept trace has request id {wanted!r}: the last {ring.capacity} traces "
                "are kept, and a request refused before it reached the API has none.",
                param="request_id",
                code="trace_not_found",
            )
        return Redirect(trace_link(found[0].trace_id), status_code=303)

    @get("/{trace_id:str}")
    async def trace(
        self, request: Request[Any, Any, Any], traces: Traces, trace_id: FromPath[str]
    ) -> Template:
        ring = _ring(traces)
        spans = ring.get(trace_id.lower())
        if spans is None:
            raise NotFound(
                f"No trace {trace_id!r} is kept here: the last {ring.capacity} are.",
                param="trace_id",
                code="trace_not_found",
            )
        return render(
            request, "traces/trace.html", area="traces", view=waterfall(trace_id.lower(), spans)
        )
