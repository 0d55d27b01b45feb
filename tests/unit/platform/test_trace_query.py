"""The traces list's filters (platform/telemetry/trace_query.py) on plain span records:
each filter keeps what it names, and each bad name or value is refused saying what to
write instead."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from vigil.platform.errors import InvalidRequest
from vigil.platform.telemetry.trace_query import OUTCOMES, TraceQuery, parse_query, select

T0 = datetime(2026, 12, 4, 22, 0, tzinfo=UTC)


def trace(
    trace_id: str,
    minute: int,
    duration_ms: float,
    status: int = 200,
    finish: str | None = "stop",
    deployment: str = "chat",
    version: str = "m@1",
) -> tuple[str, list[dict[str, Any]]]:
    start_ns = int((T0.timestamp() + minute * 60) * 1e9)
    attrs: dict[str, Any] = {
        "http.response.status_code": status,
        "vigil.deployment": deployment,
        "vigil.version": version,
        "vigil.request_id": f"req-{trace_id}",
    }
    if finish is not None:
        attrs["gen_ai.response.finish_reasons"] = [finish]
    server = {
        "name": "chat m",
        "span_id": f"s{trace_id}",
        "parent_span_id": None,
        "start_ns": start_ns,
        "duration_ms": duration_ms,
        "attributes": attrs,
    }
    child = {**server, "name": "admission", "span_id": f"c{trace_id}", "attributes": {}}
    child["parent_span_id"] = server["span_id"]
    return trace_id, [child, server]


NEWEST_FIRST = [
    trace("e", 4, 30.0, 429, None),
    trace("d", 3, 4500.0, version="m@2"),
    trace("c", 2, 80.0, finish="length", deployment="embed"),
    trace("b", 1, 900.0, 500, "error"),
    trace("a", 0, 20.0, 400, None),
]


def ids(query: TraceQuery) -> list[str]:
    return [s.trace_id for s in select(NEWEST_FIRST, query)]


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, ["e", "d", "c", "b", "a"]),
        ({"limit": "2"}, ["e", "d"]),
        ({"deployment": "embed"}, ["c"]),
        ({"version": "m@2"}, ["d"]),
        ({"outcome": "shed"}, ["e"]),
        ({"outcome": "error"}, ["b"]),
        ({"outcome": "rejected"}, ["a"]),
        ({"outcome": "length"}, ["c"]),
        ({"min_duration_ms": "500"}, ["d", "b"]),
        ({"since": "2026-12-04T22:02:00Z"}, ["e", "d", "c"]),
        ({"until": "2026-12-04T22:01:00"}, ["b", "a"]),  # no offset: UTC
        ({"since": "2026-12-04T23:01:00+01:00", "until": "2026-12-04T22:03:00Z"}, ["d", "c", "b"]),
        ({"request_id": "req-c"}, ["c"]),
        ({"deployment": "", "outcome": " "}, ["e", "d", "c", "b", "a"]),  # empty: not given
        ({"min_duration_ms": "100", "version": "m@1", "limit": "1"}, ["b"]),
    ],
)
def test_each_filter_keeps_the_traces_it_names(params: dict[str, str], expected: list[str]) -> None:
    assert ids(parse_query(params)) == expected


@pytest.mark.parametrize(
    ("params", "param", "says"),
    [
        ({"min_duration": "5"}, "min_duration", "deployment, version, outcome, min_duration_ms"),
        ({"outcome": "ok"}, "outcome", ", ".join(OUTCOMES)),
        ({"min_duration_ms": "slow"}, "min_duration_ms", "a number of milliseconds, 0 or more"),
        ({"min_duration_ms": "-1"}, "min_duration_ms", "0 or more"),
        ({"min_duration_ms": "nan"}, "min_duration_ms", "0 or more"),
        ({"limit": "0"}, "limit", "a whole number, from 1 to 1000"),
        ({"limit": "2.5"}, "limit", "a whole number"),
        ({"since": "yesterday"}, "since", "ISO 8601 time: write e.g. 2026-12-04T22:30:00Z"),
        ({"since": "2026-12-04T22:00Z", "until": "2026-12-04T21:00Z"}, "until", "before since"),
    ],
)
def test_a_bad_name_or_value_is_refused_naming_it(
    params: dict[str, str], param: str, says: str
) -> None:
    with pytest.raises(InvalidRequest) as raised:
        parse_query(params)
    assert raised.value.param == param
    assert param in raised.value.message and says in raised.value.message
