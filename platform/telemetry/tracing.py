"""Request traces with the OpenTelemetry SDK, following its GenAI conventions.

Spans are built at the edges, from each request's own clock; the engine keeps no tracing
dependency. One API request is one trace:

    chat <model>                    server span: HTTP attributes, gen_ai.* and vigil.*
      grammar                       a constrained output's grammar compiled (or found
                                    compiled) before admission: its kind, cached or not
      admission                     verdict, reason, predicted TTFT (one per deployment
                                    it was decided on: two after a fallback)
      worker <replica>              the hop to the worker; its traceparent goes along, so
        vigil.worker generate         the worker's own span joins the trace (worker side)
        queue | prefill | decode    from the request's timestamps; prefill and decode
                                    carry their engine step time split into the request's
                                    own tokens and the rest of the batch's

An incoming W3C `traceparent` is the trace's parent only from a peer the operator trusts
(`--trace-parent-from`: the proxy or mesh that starts traces); from anyone else it is a
link from a new trace, so that an API key holder can neither write spans into someone
else's trace nor decide whether theirs is sampled. The response carries the trace id
(`x-vigil-trace-id`). Sampling is a trusted parent's decision, else a ratio; every span is
recorded and the keep-or-drop choice is made when the request ends, so the traces of
failed, shed and over-SLO requests are always kept. Kept spans go to a bounded ring
(`/api/admin/traces`) and, with an OTLP endpoint, to an exporter behind a bounded queue
that drops (and counts the drops) rather than blocking a request. With tracing off
nothing here runs.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from vigil.engine.request import StepTimes
from vigil.platform.settings import TraceSettings
from vigil.platform.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

TRACE_HEADER = "x-vigil-trace-id"
KEEP = "vigil.keep"  # set on the spans of a trace kept whatever the sampler said
EXPORT_QUEUE = 2048  # spans waiting for the exporter; more are dropped and counted
EXPORT_BATCH = 256
EXPORT_INTERVAL_S = 1.0

_propagator = TraceContextTextMapPropagator()

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


_WALL_OFFSET_NS = time.time_ns() - time.monotonic_ns()


def wall_ns(monotonic_ts: float) -> int:
    """A time.monotonic() timestamp as epoch nanoseconds, as spans want them (one offset
    per process, so that spans that share an instant share its timestamp)."""
    return _WALL_OFFSET_NS + int(monotonic_ts * 1e9)


class KeepDeciding(Sampler):
    """The inner sampler's verdict, except that a span it would drop is still recorded
    (not sampled): whether its trace is kept is decided when the request ends."""

    def __init__(self, inner: Sampler) -> None:
        self.inner = inner

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Any = None,
        links: Any = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        result = self.inner.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )
        if result.decision is Decision.DROP:  # a dropped result carries no attributes
            return SamplingResult(Decision.RECORD_ONLY, attributes, result.trace_state)
        return result

    def get_description(self) -> str:
        return f"KeepDeciding{{{self.inner.get_description()}}}"


def kept(span: ReadableSpan) -> bool:
    return bool(span.context and span.context.trace_flags.sampled) or bool(
        span.attributes and span.attributes.get(KEEP)
    )


class TraceRing(SpanProcessor):
    """The last `capacity` kept traces, in memory, for the admin API and the console."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._traces: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        if not kept(span) or span.context is None:
            return
        trace_id = format(span.context.trace_id, "032x")
        with self._lock:
            spans = self._traces.setdefault(trace_id, [])
            spans.append(span_dict(span))
            self._traces.move_to_end(trace_id)
            while len(self._traces) > self.capacity:
                self._traces.popitem(last=False)

    def recent(self, limit: int) -> list[tuple[str, list[dict[str, Any]]]]:
        with self._lock:
            items = list(self._traces.items())[-limit:]
        return [(tid, list(spans)) for tid, spans in reversed(items)]

    def get(self, trace_id: str) -> list[dict[str, Any]] | None:
        with self._lock:
            spans = self._traces.get(trace_id)
            return list(spans) if spans is not None else None


def span_dict(span: ReadableSpan) -> dict[str, Any]:
    assert span.context is not None
    parent = span.parent
    return {
        "name": span.name,
        "span_id": format(span.context.span_id, "016x"),
        "parent_span_id": format(parent.span_id, "016x") if parent is not None else None,
        "kind": span.kind.name.lower(),
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "duration_ms": round(((span.end_time or 0) - (span.start_time or 0)) / 1e6, 3),
        "status": span.status.status_code.name.lower(),
        "attributes": dict(span.attributes or {}),
        "links": [
            {
                "trace_id": format(link.context.trace_id, "032x"),
                "span_id": format(link.context.span_id, "016x"),
            }
            for link in span.links
        ],
    }


class BoundedExport(SpanProcessor):
    """Kept spans to an exporter in batches from a thread, behind a bounded queue: a full
    queue or a failed export drops spans and counts them, never blocks a request."""

    def __init__(
        self,
        exporter: SpanExporter,
        on_dropped: Callable[[int], None],
        capacity: int = EXPORT_QUEUE,
    ) -> None:
        self.exporter = exporter
        self._on_dropped = on_dropped
        self._queue: queue.Queue[ReadableSpan] = queue.Queue(capacity)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="span-export", daemon=True)
        self._thread.start()

    def on_end(self, span: ReadableSpan) -> None:
        if not kept(span):
            return
        try:
            self._queue.put_nowait(span)
        except queue.Full:
            self._on_dropped(1)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._stop.wait(EXPORT_INTERVAL_S)
            self._flush()
        self._flush()

    def _flush(self) -> None:
        while True:
            batch: list[ReadableSpan] = []
            with contextlib.suppress(queue.Empty):
                while len(batch) < EXPORT_BATCH:
                    batch.append(self._queue.get_nowait())
            if not batch:
                return
            try:
                ok = self.exporter.export(batch) is SpanExportResult.SUCCESS
            except Exception:
                log.exception("span export failed")
                ok = False
            if not ok:
                self._on_dropped(len(batch))

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self._flush()
        return True

    def shutdown(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.exporter.shutdown()


def provider(
    service: str,
    ratio: float,
    processors: Sequence[SpanProcessor],
) -> TracerProvider:
    sampler = KeepDeciding(ParentBased(TraceIdRatioBased(ratio)))
    tracer_provider = TracerProvider(
        sampler=sampler, resource=Resource.create({"service.name": service})
    )
    for p in processors:
        tracer_provider.add_span_processor(p)
    return tracer_provider


def otlp_exporter(endpoint: str) -> SpanExporter:
    """OTLP/HTTP (protobuf) to `endpoint` (a base URL: /v1/traces is added, as the
    OTEL_EXPORTER_OTLP_ENDPOINT variable means)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces", timeout=5)


def parent_context(headers: Mapping[str, str]) -> Context:
    return _propagator.extract(dict(headers))


def joins_parent(peer: str | None, trusted: Sequence[IPNetwork]) -> bool:
    """Whether a caller's traceparent becomes its request's parent: only a trusted
    peer's. An IPv4 peer seen on an IPv6 socket (::ffff:a.b.c.d) is its IPv4 address."""
    if peer is None or not trusted:
        return False
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:  # not an IP peer (a Unix socket, a test client's name)
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in trusted)


def traceparent(span: Span) -> dict[str, str]:
    carrier: dict[str, str] = {}
    _propagator.inject(carrier, trace.set_span_in_context(span))
    return carrier


STEPS_OWN = "vigil.steps.own_s"  # the phase's share of engine steps for its own tokens
STEPS_SHARED = "vigil.steps.shared_s"  # the rest of those steps: other sequences' tokens


def steps(own_s: float, shared_s: float) -> dict[str, float]:
    """A phase's engine step time, split (engine/request.py StepTimes): time spent
    waiting behind other sequences in shared steps shows as such, not as the phase's."""
    return {STEPS_OWN: round(own_s, 6), STEPS_SHARED: round(shared_s, 6)}


@dataclass(slots=True)
class _Hop:
    span: Span
    arrival_ts: float  # monotonic: when the request was sent


class RequestTrace:
    """One API request's spans. The server span is live from the start; the rest are
    written as the request moves, from its own timestamps."""

    def __init__(self, tracer: trace.Tracer, span: Span) -> None:
        self.tracer = tracer
        self.server = span
        self.keep = False
        self._hop: _Hop | None = None
        # Children of the server span are written when the response is done, once it is
        # known whether the trace is kept (a span's attributes are fixed once it ends).
        self._pending: list[tuple[str, float, float, dict[str, Any]]] = []

    @property
    def sampled(self) -> bool:
        return bool(self.server.get_span_context().trace_flags.sampled)

    @property
    def trace_id(self) -> str:
        return format(self.server.get_span_context().trace_id, "032x")

    def _child(self, name: str, parent: Span, start_ts: float, end_ts: float, **attrs: Any) -> Span:
        ctx = trace.set_span_in_context(parent)
        span = self.tracer.start_span(name, ctx, start_time=wall_ns(start_ts), attributes=attrs)
        span.end(end_time=wall_ns(end_ts))
        return span

    def admission(
        self,
        deployment: str,
        version: str,
        verdict: str,
        reason: str,
        predicted_ttft_s: float | None,
        start_ts: float,
        decided_ts: float | None = None,
    ) -> None:
        attrs: dict[str, Any] = {
            "vigil.deployment": deployment,
            "vigil.version": version,
            "vigil.admission.verdict": verdict,
            "vigil.admission.reason": reason,
        }
        if predicted_ttft_s is not None:
            attrs["vigil.admission.predicted_ttft_s"] = round(predicted_ttft_s, 4)
        if verdict == "shed":
            self.keep = True
        end_ts = time.monotonic() if decided_ts is None else decided_ts
        self._pending.append(("admission", start_ts, end_ts, attrs))

    def grammar(self, kind: str, cached: bool, start_ts: float, end_ts: float) -> None:
        attrs = {"vigil.grammar.kind": kind, "vigil.grammar.cached": cached}
        self._pending.append(("grammar", start_ts, end_ts, attrs))

    def worker_headers(self, replica: str, start_ts: float) -> dict[str, str]:
        """Open the hop to a worker (a retry to another replica opens another) and the
        traceparent to send along, so the worker's span joins this trace."""
        if self._hop is not None:
            self._hop.span.set_attribute("vigil.unreachable", True)
            self._hop.span.end()
        ctx = trace.set_span_in_context(self.server)
        span = self.tracer.start_span(
            f"worker {replica}",
            ctx,
            kind=SpanKind.CLIENT,
            start_time=wall_ns(start_ts),
            attributes={"vigil.replica": replica},
        )
        self._hop = _Hop(span, start_ts)
        return traceparent(span)

    def set(self, **attrs: Any) -> None:
        for key, value in attrs.items():
            if value is not None:
                self.server.set_attribute(key, value)

    def ended(
        self,
        *,
        cached_prompt_tokens: int | None,
        prefill_chunks: int | None,
        step_times: StepTimes | None,
        scheduled_ts: float | None,
        first_token_ts: float | None,
        finished_ts: float,
        failed: bool,
        over_slo: bool,
    ) -> None:
        """The request's end at the engine, from its own clock: the hop ends, and its
        queue, prefill and decode phases are written under it."""
        self.keep = self.keep or failed or over_slo
        hop = self._hop
        if hop is None:
            return
        keep = {KEEP: True} if self.keep else {}
        prefill: dict[str, Any] = {}
        if cached_prompt_tokens is not None:
            prefill["vigil.cached_prompt_tokens"] = cached_prompt_tokens
        if prefill_chunks is not None:
            prefill["vigil.prefill_chunks"] = prefill_chunks
        decode: dict[str, Any] = {}
        if step_times is not None:
            prefill.update(steps(step_times.prefill_own_s, step_times.prefill_shared_s))
            decode.update(steps(step_times.decode_own_s, step_times.decode_shared_s))
        phases: list[tuple[str, float, float, dict[str, Any]]] = []
        if scheduled_ts is not None:
            phases.append(("queue", hop.arrival_ts, scheduled_ts, {}))
            if first_token_ts is not None:
                phases.append(("prefill", scheduled_ts, first_token_ts, prefill))
                phases.append(("decode", first_token_ts, finished_ts, decode))
        for name, a, b, attrs in phases:
            self._child(name, hop.span, a, b, **attrs, **keep)
        if failed:
            hop.span.set_status(Status(StatusCode.ERROR))
        if self.keep:
            hop.span.set_attribute(KEEP, True)
        hop.span.end(end_time=wall_ns(finished_ts))
        self._hop = None

    def close(self, status_code: int) -> None:
        """The HTTP response is done: write what is pending and end the server span."""
        if status_code >= 500 or status_code == 429:
            self.keep = True
        for name, a, b, attrs in self._pending:
            self._child(name, self.server, a, b, **attrs, **({KEEP: True} if self.keep else {}))
        if self._hop is not None:  # the request never ended at the engine (refused there)
            self._hop.span.end()
        self.server.set_attribute("http.response.status_code", status_code)
        if status_code >= 500:
            self.server.set_status(Status(StatusCode.ERROR))
        if self.keep:
            self.server.set_attribute(KEEP, True)
        self.server.end()


class Tracing:
    def __init__(
        self,
        tracer_provider: TracerProvider,
        ring: TraceRing,
        parent_from: Sequence[IPNetwork] = (),
    ) -> None:
        self.provider = tracer_provider
        self.tracer = tracer_provider.get_tracer("vigil")
        self.ring = ring
        self.parent_from = tuple(parent_from)

    def begin(
        self, method: str, path: str, headers: Mapping[str, str], peer: str | None
    ) -> RequestTrace:
        """The request's server span: under the caller's traceparent if `peer` is trusted,
        else the root of a new trace that links to the caller's span."""
        carried = parent_context(headers)
        links: list[Link] = []
        if not joins_parent(peer, self.parent_from):
            caller = trace.get_current_span(carried).get_span_context()
            if caller.is_valid:
                links.append(Link(caller))
            carried = Context()
        span = self.tracer.start_span(
            f"{method} {path}",
            carried,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": path},
            links=links,
        )
        return RequestTrace(self.tracer, span)

    def shutdown(self) -> None:
        self.provider.shutdown()


class WorkerSpans:
    """A worker's side of a trace: one span per generation, under the hop span whose
    traceparent the gateway sent, written from the request's own clock when it ends."""

    def __init__(self, tracer_provider: TracerProvider, worker_id: str) -> None:
        self.provider = tracer_provider
        self.tracer = tracer_provider.get_tracer("vigil.worker")
        self.worker_id = worker_id

    @classmethod
    def of(cls, settings: TraceSettings, worker_id: str, dropped: Any) -> WorkerSpans | None:
        if not settings.otlp_endpoint:
            return None
        export = BoundedExport(otlp_exporter(settings.otlp_endpoint), dropped.inc)
        return cls(provider("vigil-worker", settings.sample_ratio, [export]), worker_id)

    def generated(
        self, traceparent_header: str, slot: str, request: Any, finish: Any | None
    ) -> None:
        """`request`: the engine's GenerationRequest; `finish`: its FinishEvent, None when
        the caller left first."""
        clock = request.clock
        failed = finish is None or finish.reason.value in ("error", "timeout")
        attrs: dict[str, Any] = {
            "vigil.replica": self.worker_id,
            "vigil.engine": slot,
            "vigil.request_id": request.request_id,
            "gen_ai.usage.input_tokens": len(request.prompt_ids),
        }
        if finish is not None:
            attrs["gen_ai.usage.output_tokens"] = finish.num_output_tokens
            attrs["gen_ai.response.finish_reasons"] = [finish.reason.value]
        if clock.queue_time_s is not None:
            attrs["vigil.queue_s"] = round(clock.queue_time_s, 6)
        if failed:
            attrs[KEEP] = True
        span = self.tracer.start_span(
            "vigil.worker generate",
            parent_context({"traceparent": traceparent_header}),
            kind=SpanKind.SERVER,
            start_time=wall_ns(clock.arrival_ts),
            attributes=attrs,
        )
        if failed:
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=wall_ns(clock.finished_ts or time.monotonic()))

    def shutdown(self) -> None:
        self.provider.shutdown()


def build_tracing(settings: TraceSettings, service: str, metrics: Metrics) -> Tracing | None:
    """The gateway's tracing, or None when it is off."""
    if not settings.enabled:
        return None
    ring = TraceRing(settings.buffer)
    processors: list[SpanProcessor] = [ring]
    if settings.otlp_endpoint:
        exporter = otlp_exporter(settings.otlp_endpoint)
        processors.append(BoundedExport(exporter, metrics.spans_dropped.inc))
    trusted = [ipaddress.ip_network(n) for n in settings.parent_from]
    return Tracing(provider(service, settings.sample_ratio, processors), ring, trusted)
