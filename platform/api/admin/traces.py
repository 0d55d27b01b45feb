"""`/api/admin/traces`: the last traces kept in memory (`--trace-buffer`), each a list of
spans with their parents, times and attributes: enough to draw a request's waterfall
without a tracing backend."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, get
from litestar.params import FromPath, QueryParameter
from msgspec import Struct

from vigil.platform.api.admin.deps import Traces
from vigil.platform.api.admin.responses import error_responses
from vigil.platform.errors import NotFound
from vigil.platform.telemetry.tracing import TraceRing

MAX_TRACES = 1000


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


def _root(spans: list[dict[str, Any]]) -> dict[str, Any]:
    ids = {s["span_id"] for s in spans}
    roots = [s for s in spans if s["parent_span_id"] not in ids]
    return min(roots or spans, key=lambda s: s["start_ns"] or 0)


class TraceController(Controller):
    path = "/traces"

    @get("/", summary="The last traces kept, newest first", responses=error_responses(404))
    async def list_traces(
        self,
        traces: Traces,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_TRACES)] = 50,
    ) -> list[TraceSummaryOut]:
        out = []
        for trace_id, spans in _ring(traces).recent(limit):
            root = _root(spans)
            out.append(
                TraceSummaryOut(
                    trace_id=trace_id,
                    name=root["name"],
                    start_ns=root["start_ns"],
                    duration_ms=root["duration_ms"],
                    status_code=root["attributes"].get("http.response.status_code"),
                    num_spans=len(spans),
                )
            )
        return out

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
