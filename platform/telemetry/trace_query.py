"""Which kept traces a reader asked for: the filters of `GET /api/admin/traces` and of the
console's Traces page, parsed once from query text into a `TraceQuery`, and applied to
the ring's traces through one summary per trace (its server span's attributes).

A trace's outcome is the request's, as `vigil_requests_total{outcome}` counts it (stop,
length, abort, shed, timed_out, error), or `rejected` for a request refused before it
reached a deployment (a 4xx other than 429: a bad body, an unknown model).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from vigil.platform.errors import InvalidRequest
from vigil.platform.telemetry.recorder import Outcome
from vigil.platform.telemetry.tracing import TraceRing

REJECTED = "rejected"
OUTCOMES = (*(o.value for o in Outcome), REJECTED)
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
PARAMS = (
    "deployment",
    "version",
    "outcome",
    "min_duration_ms",
    "since",
    "until",
    "request_id",
    "limit",
)


@dataclass(frozen=True, slots=True)
class TraceQuery:
    deployment: str | None = None
    version: str | None = None  # model@version
    outcome: str | None = None  # one of OUTCOMES
    min_duration_ms: float | None = None
    since: datetime | None = None  # aware, UTC
    until: datetime | None = None
    request_id: str | None = None  # the x-request-id the response carried
    limit: int = DEFAULT_LIMIT


@dataclass(frozen=True, slots=True)
class TraceSummary:
    """One kept trace as the list shows it, read from its server span."""

    trace_id: str
    name: str  # "<operation> <model>"
    start_ns: int | None
    duration_ms: float
    status_code: int | None
    num_spans: int
    deployment: str | None
    version: str | None
    outcome: str | None
    request_id: str | None

    @property
    def started(self) -> datetime | None:
        if self.start_ns is None:
            return None
        return datetime.fromtimestamp(self.start_ns / 1e9, UTC)


def parse_query(params: Mapping[str, str | None]) -> TraceQuery:
    """The filters from query text (empty values count as not given); an unknown name or
    a bad value raises InvalidRequest naming it and what it may be."""
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        raise InvalidRequest(
            f"Unknown query parameter {unknown[0]!r}: traces are filtered by {', '.join(PARAMS)}.",
            param=unknown[0],
            code="unknown_parameter",
        )
    given = {k: v.strip() for k, v in params.items() if v is not None and v.strip()}
    outcome = given.get("outcome")
    if outcome is not None and outcome not in OUTCOMES:
        raise InvalidRequest(
            f"outcome {outcome!r} is not one of: {', '.join(OUTCOMES)}.",
            param="outcome",
            code="invalid_value",
        )
    since, until = _time(given, "since"), _time(given, "until")
    if since is not None and until is not None and until < since:
        raise InvalidRequest(
            f"until ({until.isoformat()}) is before since ({since.isoformat()}).",
            param="until",
            code="invalid_value",
        )
    minimum = _number(given, "min_duration_ms", float, 0, None)
    limit = _number(given, "limit", int, 1, MAX_LIMIT)
    return TraceQuery(
        deployment=given.get("deployment"),
        version=given.get("version"),
        outcome=outcome,
        min_duration_ms=minimum,
        since=since,
        until=until,
        request_id=given.get("request_id"),
        limit=DEFAULT_LIMIT if limit is None else int(limit),
    )


def _time(given: Mapping[str, str], name: str) -> datetime | None:
    text = given.get(name)
    if text is None:
        return None
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T"))
    except ValueError:
        raise InvalidRequest(
            f"{name} {text!r} is not an ISO 8601 time: write e.g. 2026-12-04T22:30:00Z "
            "(without an offset it is read as UTC).",
            param=name,
            code="invalid_value",
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _number(given: Mapping[str, str], name: str, kind: type, low: float, high: float | None) -> Any:
    text = given.get(name)
    if text is None:
        return None
    bounds = f"from {low} to {high}" if high is not None else f"{low} or more"
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or value != value or value < low or (high is not None and value > high):
        what = "a whole number" if kind is int else "a number of milliseconds"
        raise InvalidRequest(
            f"{name} {text!r} is not valid: it takes {what}, {bounds}.",
            param=name,
            code="invalid_value",
        )
    return value


def root_span(spans: list[dict[str, Any]]) -> dict[str, Any]:
    """The trace's server span: the earliest span whose parent is not in the trace."""
    ids = {s["span_id"] for s in spans}
    roots = [s for s in spans if s["parent_span_id"] not in ids]
    return min(roots or spans, key=lambda s: s["start_ns"] or 0)


def summarize(trace_id: str, spans: list[dict[str, Any]]) -> TraceSummary:
    root = root_span(spans)
    attrs = root["attributes"]
    status = attrs.get("http.response.status_code")
    return TraceSummary(
        trace_id=trace_id,
        name=root["name"],
        start_ns=root["start_ns"],
        duration_ms=root["duration_ms"],
        status_code=status,
        num_spans=len(spans),
        deployment=attrs.get("vigil.deployment"),
        version=attrs.get("vigil.version"),
        outcome=outcome_of(attrs, status),
        request_id=attrs.get("vigil.request_id"),
    )


def outcome_of(attrs: Mapping[str, Any], status: int | None) -> str | None:
    reasons = attrs.get("gen_ai.response.finish_reasons")
    if reasons:
        return str(reasons[0])
    if status == 429:
        return Outcome.SHED.value
    if status == 499:
        return Outcome.ABORT.value
    if status is not None and status >= 500:
        return Outcome.ERROR.value
    if status is not None and status >= 400:
        return REJECTED
    return None  # not ended yet, or a request that is no generation


def matches(summary: TraceSummary, query: TraceQuery) -> bool:
    started = summary.started
    checks = (
        query.deployment is None or summary.deployment == query.deployment,
        query.version is None or summary.version == query.version,
        query.outcome is None or summary.outcome == query.outcome,
        query.request_id is None or summary.request_id == query.request_id,
        query.min_duration_ms is None or summary.duration_ms >= query.min_duration_ms,
        query.since is None or (started is not None and started >= query.since),
        query.until is None or (started is not None and started <= query.until),
    )
    return all(checks)


def select(
    traces: Iterable[tuple[str, list[dict[str, Any]]]], query: TraceQuery
) -> list[TraceSummary]:
    """The newest `query.limit` traces (of `traces`, newest first) that match."""
    found: list[TraceSummary] = []
    for trace_id, spans in traces:
        summary = summarize(trace_id, spans)
        if matches(summary, query):
            found.append(summary)
            if len(found) >= query.limit:
                break
    return found


def search(ring: TraceRing, query: TraceQuery) -> list[TraceSummary]:
    return select(ring.recent(ring.capacity), query)


def slowest(ring: TraceRing, deployment: str, since: datetime, n: int) -> list[TraceSummary]:
    """The deployment's `n` longest kept traces since `since`: the overview's exemplars,
    each a link to its waterfall."""
    query = TraceQuery(deployment=deployment, since=since, limit=ring.capacity)
    return sorted(search(ring, query), key=lambda s: -s.duration_ms)[:n]
