"""The console's Traces page on a real HTTP server in process, with a scripted engine
whose finish reports how its steps' time was split: the list filtered as the admin API
filters it, a waterfall that shows the time spent behind other sequences as such, and
a lookup by the x-request-id a caller reports."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
from fakes import FakeWorkers, Gateway, ScriptedEngine, gateway_client

from vigil.engine.bundled import SMOLLM2
from vigil.engine.request import StepTimes
from vigil.platform.control.specs import bundled_version
from vigil.web.waterfall import SHARED, waterfall

STABLE = bundled_version(SMOLLM2).key
CHAT = {"model": SMOLLM2, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
HTMX = {"hx-request": "true"}


@pytest.fixture(scope="module")
async def gateway(tmp_path_factory, smollm2_tokenizer) -> AsyncIterator[Gateway]:  # type: ignore[no-untyped-def]
    workers = FakeWorkers()
    # Prefill: 1 ms of its own tokens, 30 ms behind the rest of the batch.
    steps = StepTimes(0.001, 0.030, 0.002, 0.004)
    engine = ScriptedEngine(num_tokens=4, auto_release=True, token_gap_s=0.02, step_times=steps)
    workers.add("w1", {STABLE: engine})
    data_dir = tmp_path_factory.mktemp("console-traces")
    async with gateway_client(data_dir, workers, smollm2_tokenizer, models=(SMOLLM2,)) as (gw, _):
        yield gw


async def test_a_request_is_listed_and_opens_its_waterfall(gateway: Gateway) -> None:
    client = gateway.client
    r = await client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200
    trace_id = r.headers["x-vigil-trace-id"]
    page = await client.get("/console/traces")
    assert page.status_code == 200
    assert f'href="/console/traces/{trace_id}"' in page.text
    assert 'href="/console/traces"' in page.text  # the navigation link
    shown = await client.get(f"/console/traces/{trace_id}")
    overview = (await client.get("/console/")).text
    # The overview's exemplars lead to the slowest kept traces of each deployment.
    exemplars = re.search(r'id="exemplars-[^"]*">(.*?)</p>', overview, re.S)
    assert exemplars and 'href="/console/traces/' in exemplars.group(1)
    assert shown.status_code == 200
    html = shown.text
    for span in ("admission", "queue", "prefill", "decode"):
        assert f'data-span="{span}"' in html
    assert "prompt tokens cached" in html
    assert "behind other sequences 30 ms" in html
    assert 'class="seg seg-shared"' in html and 'id="waited-behind"' in html


async def test_the_list_filters_in_place_and_refuses_a_bad_filter(gateway: Gateway) -> None:
    client = gateway.client
    assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
    rows = await client.get("/console/traces", params={"outcome": "length"}, headers=HTMX)
    assert rows.status_code == 200 and rows.text.lstrip().startswith('<table id="trace-rows"')
    assert 'class="trace-row"' in rows.text
    none = await client.get("/console/traces", params={"min_duration_ms": "9e9"}, headers=HTMX)
    assert 'class="trace-row"' not in none.text and "No kept trace matches" in none.text
    bad = await client.get("/console/traces", params={"min_duration_ms": "slow"}, headers=HTMX)
    assert bad.status_code == 400 and bad.headers["hx-retarget"] == "#flash"
    assert "min_duration_ms" in bad.text and "0 or more" in bad.text
    unknown = await client.get("/console/traces?colour=red")
    assert unknown.status_code == 400 and "min_duration_ms" in unknown.text


async def test_a_request_id_leads_to_its_trace(gateway: Gateway) -> None:
    client = gateway.client
    r = await client.post("/v1/chat/completions", json=CHAT)
    request_id, trace_id = r.headers["x-request-id"], r.headers["x-vigil-trace-id"]
    found = await client.get("/console/traces/lookup", params={"request_id": request_id})
    assert found.status_code == 303
    assert found.headers["location"] == f"/console/traces/{trace_id}"
    missing = await client.get("/console/traces/lookup", params={"request_id": "req-nope"})
    assert missing.status_code == 404 and "req-nope" in missing.text
    empty = await client.get("/console/traces/lookup", params={"request_id": " "})
    assert empty.status_code == 400 and "x-request-id" in empty.text


def test_a_phase_is_split_into_own_shared_and_between_that_fill_its_bar() -> None:
    server = {
        "name": "chat m",
        "span_id": "a",
        "parent_span_id": None,
        "start_ns": 0,
        "end_ns": 100_000_000,
        "duration_ms": 100.0,
        "status": "unset",
        "attributes": {"gen_ai.usage.input_tokens": 41},
    }
    prefill = {
        **server,
        "name": "prefill",
        "span_id": "b",
        "parent_span_id": "a",
        "start_ns": 20_000_000,
        "end_ns": 60_000_000,
        "duration_ms": 40.0,
        "attributes": {
            "vigil.steps.own_s": 0.005,
            "vigil.steps.shared_s": 0.030,
            "vigil.cached_prompt_tokens": 33,
            "vigil.prefill_chunks": 1,
        },
    }
    view = waterfall("t", [prefill, server])
    root, bar = view.bars
    assert (root.depth, bar.depth) == (0, 1)
    assert (bar.offset_pct, bar.width_pct) == (20.0, 40.0)
    assert [(s.kind, s.duration_ms) for s in bar.segments] == [
        ("own", 5.0),
        (SHARED, 30.0),
        ("between", 5.0),
    ]
    assert sum(s.width_pct for s in bar.segments) == pytest.approx(100)
    assert "33 of 41 prompt tokens cached" in bar.notes and "1 chunk" in bar.notes
    assert view.shared_ms == 30.0
    assert re.search(r"behind other sequences 30 ms", " ".join(bar.notes))
