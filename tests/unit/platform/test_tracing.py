"""Request traces through the gateway, kept in the in-memory ring: a trusted caller's
traceparent joined and anyone else's only linked, one trace per request with the
admission, the hop to the worker (whose traceparent goes along) and the engine phases
adding up, GenAI attributes; a shed request kept whatever the sampler says; log lines and
the access line carry the request's ids."""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fakes import FakeWorkers, Gateway, ScriptedEngine, gateway_client

from vigil.engine.bundled import SMOLLM2
from vigil.engine.request import StepTimes
from vigil.platform.control.access.records import Role
from vigil.platform.control.specs import SLOTargets, bundled_version
from vigil.platform.settings import TraceSettings
from vigil.platform.telemetry.context import ContextFilter, JsonFormatter
from vigil.platform.telemetry.tracing import TRACE_HEADER, joins_parent

STABLE = bundled_version(SMOLLM2).key
CHAT = {"model": SMOLLM2, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 3}
PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"


OPS = ("ops", "ops password 1")


def traced(ratio: float, parent_from: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"tracing": TraceSettings(sample_ratio=ratio, buffer=32, parent_from=parent_from)}


async def operator(gateway: Gateway) -> None:
    await gateway.services.plane.users.create(*OPS, Role.OPERATOR, actor="cli")


@pytest.fixture
async def client(tmp_path, smollm2_tokenizer) -> AsyncIterator[httpx.AsyncClient]:  # type: ignore[no-untyped-def]
    workers = FakeWorkers()
    workers.add("w1", {STABLE: ScriptedEngine(auto_release=True, token_gap_s=0.01)})
    async with gateway_client(tmp_path, workers, smollm2_tokenizer, **traced(1.0)) as (gw, c):
        await operator(gw)
        yield c


async def trace_of(client: httpx.AsyncClient, trace_id: str) -> list[dict[str, Any]]:
    r = await client.get(f"/api/admin/traces/{trace_id}", auth=OPS)
    assert r.status_code == 200, r.text
    spans: list[dict[str, Any]] = r.json()["spans"]
    return spans


async def test_a_request_is_one_trace_under_a_trusted_callers_parent(
    tmp_path, smollm2_tokenizer
) -> None:  # type: ignore[no-untyped-def]
    workers = FakeWorkers()
    steps = StepTimes(0.002, 0.003, 0.004, 0.005)
    engine = ScriptedEngine(auto_release=True, token_gap_s=0.01, step_times=steps)
    workers.add("w1", {STABLE: engine})
    trusted = traced(1.0, parent_from=("127.0.0.0/8",))
    # The in-process client calls from 127.0.0.1, a trusted peer here.
    async with gateway_client(tmp_path, workers, smollm2_tokenizer, **trusted) as (gateway, client):
        await operator(gateway)
        await one_trace_under_the_callers_parent(gateway, client)


async def one_trace_under_the_callers_parent(gateway: Gateway, client: httpx.AsyncClient) -> None:
    parent = f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"
    r = await client.post("/v1/chat/completions", json=CHAT, headers={"traceparent": parent})
    assert r.status_code == 200
    assert r.headers[TRACE_HEADER] == PARENT_TRACE
    spans = await trace_of(client, PARENT_TRACE)
    listed = (await client.get("/api/admin/traces", auth=OPS)).json()
    by_name = {s["name"]: s for s in spans}
    server = by_name[f"chat {SMOLLM2}"]
    assert server["parent_span_id"] == PARENT_SPAN and server["kind"] == "server"
    a = server["attributes"]
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == SMOLLM2
    assert a["gen_ai.response.model"] == STABLE and a["gen_ai.request.max_tokens"] == 3
    assert a["gen_ai.usage.output_tokens"] == 3 and a["gen_ai.response.finish_reasons"] == [
        "length"
    ]
    assert a["vigil.priority"] == "interactive" and a["vigil.replica"] == "w1"
    assert a["http.response.status_code"] == 200
    assert by_name["admission"]["parent_span_id"] == server["span_id"]
    assert by_name["admission"]["attributes"]["vigil.admission.verdict"] == "admitted"
    hop = by_name["worker w1"]
    assert hop["parent_span_id"] == server["span_id"] and hop["kind"] == "client"
    phases = [by_name[n] for n in ("queue", "prefill", "decode")]
    assert all(p["parent_span_id"] == hop["span_id"] for p in phases)
    assert (
        phases[0]["end_ns"] == phases[1]["start_ns"]
        and phases[1]["end_ns"] == phases[2]["start_ns"]
    )
    # The engine's step time, split into the request's own tokens and the batch's.
    prefill, decode = phases[1]["attributes"], phases[2]["attributes"]
    assert (prefill["vigil.steps.own_s"], prefill["vigil.steps.shared_s"]) == (0.002, 0.003)
    assert (decode["vigil.steps.own_s"], decode["vigil.steps.shared_s"]) == (0.004, 0.005)
    phases_ms = sum(p["duration_ms"] for p in phases)
    assert abs(phases_ms - hop["duration_ms"]) < 5.0 and hop["duration_ms"] <= server["duration_ms"]
    # The worker was sent the hop span as its parent.
    [sent] = gateway.workers.trace_headers
    assert sent["traceparent"] == f"00-{PARENT_TRACE}-{hop['span_id']}-01"
    assert listed[0]["trace_id"] == PARENT_TRACE and listed[0]["num_spans"] == len(spans)


async def test_an_untrusted_callers_traceparent_is_a_link_from_a_new_trace(
    tmp_path, smollm2_tokenizer
) -> None:  # type: ignore[no-untyped-def]
    """By default nobody's traceparent is joined: two callers naming one trace get a
    trace each, linked to what they sent, and a sampled-out flag decides nothing."""
    workers = FakeWorkers()
    workers.add("w1", {STABLE: ScriptedEngine(auto_release=True)})
    served = gateway_client(tmp_path, workers, smollm2_tokenizer, **traced(1.0))
    async with served as (gateway, client):
        await operator(gateway)
        ids = []
        for flags in ("01", "00"):
            parent = {"traceparent": f"00-{PARENT_TRACE}-{PARENT_SPAN}-{flags}"}
            r = await client.post("/v1/chat/completions", json=CHAT, headers=parent)
            assert r.status_code == 200
            ids.append(r.headers[TRACE_HEADER])
        gone = await client.get(f"/api/admin/traces/{PARENT_TRACE}", auth=OPS)
        traces = [await trace_of(client, trace_id) for trace_id in ids]
    assert PARENT_TRACE not in ids and len(set(ids)) == 2 and gone.status_code == 404
    for spans in traces:  # kept at ratio 1, whatever the caller's flag said
        [server] = [s for s in spans if s["kind"] == "server"]
        assert server["parent_span_id"] is None
        assert server["links"] == [{"trace_id": PARENT_TRACE, "span_id": PARENT_SPAN}]


@pytest.mark.parametrize(
    ("peer", "trusted", "joins"),
    [
        ("10.1.2.3", (), False),  # the default: nobody
        ("10.1.2.3", ("10.0.0.0/8",), True),
        ("10.1.2.3", ("192.168.0.0/16", "10.1.2.3/32"), True),
        ("11.0.0.1", ("10.0.0.0/8",), False),
        ("::ffff:10.1.2.3", ("10.0.0.0/8",), True),  # IPv4 on an IPv6 socket
        ("fd00::1", ("fd00::/8",), True),
        ("fd00::1", ("10.0.0.0/8",), False),
        ("testclient", ("0.0.0.0/0",), False),  # no address: not trusted
        (None, ("0.0.0.0/0",), False),
    ],
)
def test_only_a_trusted_peers_traceparent_is_joined(
    peer: str | None, trusted: tuple[str, ...], joins: bool
) -> None:
    assert joins_parent(peer, [ipaddress.ip_network(n) for n in trusted]) is joins


async def test_a_shed_request_is_kept_when_the_sampler_would_drop_it(
    tmp_path, smollm2_tokenizer
) -> None:  # type: ignore[no-untyped-def]
    workers = FakeWorkers()
    workers.add("w1", {STABLE: ScriptedEngine(auto_release=True)})
    served = gateway_client(tmp_path, workers, smollm2_tokenizer, **traced(0.0))
    async with served as (gateway, client):
        await operator(gateway)
        ok = await client.post("/v1/chat/completions", json=CHAT)
        assert ok.status_code == 200
        assert (
            await client.get(f"/api/admin/traces/{ok.headers[TRACE_HEADER]}", auth=OPS)
        ).status_code == 404
        limits = {"interactive": {"max_queue": 0, "max_queue_wait_s": 1}}
        limits["batch"] = limits["interactive"]
        record = await gateway.services.plane.deployments.get(SMOLLM2)
        patch = {"revision": record.revision, "limits": limits}
        r = await client.patch(f"/api/admin/deployments/{SMOLLM2}", json=patch, auth=OPS)
        assert r.status_code == 200, r.text
        shed = await client.post("/v1/chat/completions", json=CHAT)
        assert shed.status_code == 429
        spans = await trace_of(client, shed.headers[TRACE_HEADER])
    server = next(s for s in spans if s["kind"] == "server")
    assert server["attributes"]["http.response.status_code"] == 429
    [admission] = [s for s in spans if s["name"] == "admission"]
    assert admission["attributes"]["vigil.admission.verdict"] == "shed"


async def test_tracing_is_on_by_default_in_the_ring(tmp_path, smollm2_tokenizer) -> None:  # type: ignore[no-untyped-def]
    workers = FakeWorkers()
    workers.add("w1", {STABLE: ScriptedEngine(auto_release=True)})
    async with gateway_client(tmp_path, workers, smollm2_tokenizer) as (gateway, client):
        await operator(gateway)
        r = await client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 200, r.text
        spans = await trace_of(client, r.headers[TRACE_HEADER])
    assert {s["name"] for s in spans} >= {"admission", "queue", "prefill", "decode"}


async def test_tracing_turned_off_leaves_no_header_and_says_so(tmp_path, smollm2_tokenizer) -> None:  # type: ignore[no-untyped-def]
    workers = FakeWorkers()
    workers.add("w1", {STABLE: ScriptedEngine(auto_release=True)})
    off = {"tracing": TraceSettings(buffer=0)}
    async with gateway_client(tmp_path, workers, smollm2_tokenizer, **off) as (gateway, client):
        await operator(gateway)
        r = await client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 200 and TRACE_HEADER not in r.headers
        off = await client.get("/api/admin/traces", auth=OPS)
        assert off.status_code == 404 and off.json()["error"]["code"] == "tracing_off"
    assert workers.trace_headers == [{}]


async def test_log_lines_carry_the_request_and_trace_ids_and_one_access_line_sums_up(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.handler.addFilter(ContextFilter())
    with caplog.at_level(logging.INFO):
        r = await client.post("/v1/chat/completions", json=CHAT)
    request_id, trace_id = r.headers["x-request-id"], r.headers[TRACE_HEADER]
    [access] = [rec for rec in caplog.records if rec.name == "vigil.access"]
    assert access.request_id == request_id and access.trace_id == trace_id  # type: ignore[attr-defined]
    line = json.loads(JsonFormatter().format(access))
    assert line["request_id"] == request_id and line["trace_id"] == trace_id
    assert line["status"] == 200 and line["deployment"] == SMOLLM2 and line["version"] == STABLE
    assert line["priority"] == "interactive" and line["admission"] == "admitted"
    assert line["output_tokens"] == 3 and line["prompt_tokens"] > 0 and line["ttft_ms"] >= 0


async def test_latency_histograms_carry_the_trace_as_an_exemplar(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/chat/completions", json=CHAT)
    text = (await client.get("/metrics", headers={"accept": "application/openmetrics-text"})).text
    plain = (await client.get("/metrics")).text
    exemplar = f'# {{trace_id="{r.headers[TRACE_HEADER]}"}}'
    ttft = [line for line in text.splitlines() if line.startswith("vigil_time_to_first_token")]
    assert any(exemplar in line for line in ttft)
    assert "trace_id" not in plain


async def test_a_request_over_its_slo_is_kept_when_the_sampler_would_drop_it(
    tmp_path, smollm2_tokenizer
) -> None:  # type: ignore[no-untyped-def]
    workers = FakeWorkers()
    workers.add("w1", {STABLE: ScriptedEngine(auto_release=True, token_gap_s=0.01)})
    served = gateway_client(tmp_path, workers, smollm2_tokenizer, **traced(0.0))
    async with served as (gateway, client):
        await operator(gateway)
        slo = SLOTargets(ttft_p99_s=1e-6)  # every first token is late
        await gateway.services.plane.deployments.set_slo(SMOLLM2, slo, actor="ops")
        r = await client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 200
        spans = await trace_of(client, r.headers[TRACE_HEADER])
    assert {"queue", "prefill", "decode"} <= {s["name"] for s in spans}


async def test_a_constrained_requests_grammar_compile_is_a_span_before_its_admission(
    client: httpx.AsyncClient,
) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    asks = [
        {**CHAT, "response_format": {"type": "json_object"}, "n": 2, "seed": 4},
        {**CHAT, "response_format": {"type": "json_object"}},
        {**CHAT, "tools": tools, "tool_choice": "required"},
    ]
    grammar_spans = []
    for body in asks:
        r = await client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        by_name = {s["name"]: s for s in await trace_of(client, r.headers[TRACE_HEADER])}
        server, grammar = by_name[f"chat {SMOLLM2}"], by_name["grammar"]
        assert grammar["parent_span_id"] == server["span_id"]
        # Compiled after the request arrived and before admission decided on it.
        assert server["start_ns"] <= grammar["start_ns"] <= grammar["end_ns"]
        assert grammar["end_ns"] <= by_name["admission"]["end_ns"]
        grammar_spans.append(grammar["attributes"])
        if body is asks[0]:
            a = server["attributes"]
            assert a["gen_ai.output.type"] == "json" and a["gen_ai.request.choice.count"] == 2
            assert a["gen_ai.request.seed"] == 4
        if body is asks[2]:
            a = server["attributes"]
            assert (a["vigil.tools"], a["vigil.tool_choice"]) == (1, "required")
    assert [(g["vigil.grammar.kind"], g["vigil.grammar.cached"]) for g in grammar_spans] == [
        ("json_object", False),
        ("json_object", True),
        ("grammar", False),
    ]


async def test_the_traces_list_filters_and_refuses_an_unknown_filter(
    client: httpx.AsyncClient,
) -> None:
    r = await client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200
    bad = await client.post("/v1/chat/completions", json={"model": SMOLLM2})
    assert bad.status_code == 400

    async def listed(**params: str) -> list[dict[str, Any]]:
        got = await client.get("/api/admin/traces", params=params, auth=OPS)
        assert got.status_code == 200, got.text
        rows: list[dict[str, Any]] = got.json()
        return rows

    [by_id] = await listed(request_id=r.headers["x-request-id"])
    assert by_id["trace_id"] == r.headers[TRACE_HEADER] and by_id["outcome"] == "length"
    assert by_id["deployment"] == SMOLLM2 and by_id["version"] == STABLE
    [rejected] = await listed(outcome="rejected")
    assert rejected["trace_id"] == bad.headers[TRACE_HEADER]
    assert (await listed(request_id=bad.headers["x-request-id"])) == [rejected]
    assert await listed(version="nobody@1") == []
    assert await listed(min_duration_ms="600000") == []
    assert len(await listed(since="2000-01-01T00:00:00Z", limit="5")) == 2
    unknown = await client.get("/api/admin/traces?min_duration=5", auth=OPS)
    assert unknown.status_code == 400
    error = unknown.json()["error"]
    assert error["param"] == "min_duration" and "min_duration_ms" in error["message"]
    bad_outcome = await client.get("/api/admin/traces?outcome=ok", auth=OPS)
    assert bad_outcome.status_code == 400 and "stop, length" in bad_outcome.text
