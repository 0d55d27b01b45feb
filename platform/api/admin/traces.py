"""`/api/admin/traces`: the last traces kept in memory (`--trace-buffer`), each a list of
spans with their parents, times and attributes: enough to draw a request's waterfall
without a tracing backend."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, get
from litestar.params import FromPath, QueryParameter
from msgspec import Struct

from vigil.platform.api.admin.deps import Traces
from vigil.platform.api.admin.responses import error_responses
from vigil.platform.errors import NotFound
from vigil.platform.telemetry.trace_query import OUTCOMES, PARAMS, parse_query, search
from vigil.platform.telemetry.tracing import TraceRing


class LinkOut(Struct, kw_only=True):
    trace_id: str
    span_id: str


class SpanOut(Struct, kw_only=True):
    name: str
    span_id: str
    parent_span_id: str | None
    kind: str
    start_ns: int | None
    end_ns: int | None
    duration_ms: float
    status: str
    attributes: dict[str, Any]
    # Spans of other traces this one points to: the caller's, when its traceparent was
    # not joined (see telemetry/tracing.py).
    links: list[LinkOut]


class TraceSummaryOut(Struct, kw_only=True):
    trace_id: str
    name: str  # the server span's: "<operation> <model>"
    start_ns: int | None
    duration_ms: float
    status_code: int | None
    num_spans: int
    deployment: str | None
    version: str | None  # model@version
    outcome: str | None  # as vigil_requests_total counts it; "rejected": a 4xx before routing
    request_id: str | None


class TraceOut(Struct, kw_only=True):
    trace_id: str
    spans: list[SpanOut]  # by start time


def _span_out(span: dict[str, Any]) -> SpanOut:
    links = [LinkOut(**link) for link in span["links"]]
    return SpanOut(**{**span, "links": links})


def _ring(traces: TraceRing | None) -> TraceRing:
    if traces is None:
        raise NotFound(
            "Tracing is off: this server was started with --trace-buffer 0; start it with "
            "--trace-buffer N (the default, 256, keeps traces here).",
            code="tracing_off",
        )
    return traces


class TraceController(Controller):
    path = "/traces"

    @get(
        "/",
        summary="The last traces kept, newest first, filtered",
        description=(
            f"Query parameters: {', '.join(PARAMS)}. outcome is one of {', '.join(OUTCOMES)}; "
            "since and until are ISO 8601 times (UTC without an offset); min_duration_ms is "
            "the server span's; request_id is the x-request-id a response carried. An unknown "
            "parameter or a bad value is a 400 that names it."
        ),
        responses=error_responses(400, 404),
    )
    async def list_traces(
        self,
        request: Request[Any, Any, Any],
        traces: Traces,
        deployment: Annotated[str | None, QueryParameter(description="a deployment")] = None,
        version: Annotated[str | None, QueryParameter(description="model@version")] = None,
        outcome: Annotated[str | None, QueryParameter(description=", ".join(OUTCOMES))] = None,
        min_duration_ms: Annotated[str | None, QueryParameter(description="e.g. 500")] = None,
        since: Annotated[str | None, QueryParameter(description="ISO 8601 time")] = None,
        until: Annotated[str | None, QueryParameter(description="ISO 8601 time")] = None,
        request_id: Annotated[str | None, QueryParameter(description="x-request-id")] = None,
        limit: Annotated[
            str | None, QueryParameter(description="1 to 1000, 50 if not given")
        ] = None,
    ) -> list[TraceSummaryOut]:
        # Read from the query itself rather than the arguments: a name not declared above
        # is refused, not silently ignored. A name given twice: its last value.
        query = parse_query(dict(request.query_params.items()))
        return [
            TraceSummaryOut(
                trace_id=s.trace_id,
                name=s.name,
                start_ns=s.start_ns,
                duration_ms=s.duration_ms,
                status_code=s.status_code,
                num_spans=s.num_spans,
                deployment=s.deployment,
                version=s.version,
                outcome=s.outcome,
                request_id=s.request_id,
            )
            for s in search(_ring(traces), query)
        ]

    @get("/{trace_id:str}", summary="One trace's spans", responses=error_responses(404))
    async def get_trace(self, traces: Traces, trace_id: FromPath[str]) -> TraceOut:
        spans = _ring(traces).get(trace_id.lower())
        if spans is None:
            raise NotFound(
                f"No trace {trace_id!r} is kept here (the last {_ring(traces).capacity} are; "
                "GET /api/admin/traces lists them).",
                param="trace_id",
                code="trace_not_found",
            )
        ordered = sorted(spans, key=lambda s: s["start_ns"] or 0)
        return TraceOut(trace_id=trace_id.lower(), spans=[_span_out(s) for s in ordered])
