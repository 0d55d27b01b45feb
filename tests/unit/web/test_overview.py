"""The overview's live charts on a real HTTP server in process, with a scripted engine:
the page carries each deployment's charts and history, and the stream's points move
with the requests that /metrics counts."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fakes import FakeWorkers, Gateway, ScriptedEngine, running_gateway

from vigil.engine.bundled import SMOLLM2
from vigil.platform.control.specs import bundled_version
from vigil.platform.forecast.costs import DecodePoint, StepCosts

STABLE = bundled_version(SMOLLM2).key


@pytest.fixture(scope="module")
async def gateway(tmp_path_factory, smollm2_tokenizer) -> AsyncIterator[Gateway]:  # type: ignore[no-untyped-def]
    workers = FakeWorkers()
    costs = StepCosts((DecodePoint(1, 0.01),), 0.0, 0.0, 0.001, 0.0)
    workers.add("w1", {STABLE: ScriptedEngine(num_tokens=4, auto_release=True)}, costs=costs)
    data_dir = tmp_path_factory.mktemp("console-overview")
    async with running_gateway(data_dir, workers, smollm2_tokenizer, models=(SMOLLM2,)) as gw:
        yield gw


async def points_from_stream(client: httpx.AsyncClient, until: Any, timeout_s: float = 15) -> Any:
    """Each deployment's newest point from the stream's messages, until `until` holds."""

    async def read() -> Any:
        async with client.stream("GET", "/console/stream") as stream:
            async for line in stream.aiter_lines():
                m = re.search(
                    r'<script id="live-points" type="application/json">(.*)</script>', line
                )
                if m and until(points := json.loads(m.group(1))):
                    return points

    return await asyncio.wait_for(read(), timeout_s)


async def test_the_page_carries_each_deployments_charts_and_history(gateway: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gateway.url) as client:
        for _ in range(600):  # until the sampler's first point, however busy the machine
            if gateway.services.series.points(SMOLLM2):
                break
            await asyncio.sleep(0.05)
        page = (await client.get("/console/")).text
    assert f'data-deployment="{SMOLLM2}"' in page
    for chart in ("queue", "running", "kv", "ttft", "forecast", "tokens", "requests"):
        assert f'data-chart="{chart}"' in page
    history = json.loads(
        re.search(r'id="live-history" type="application/json">(.*?)</script>', page).group(1)
    )  # type: ignore[union-attr]
    assert history[SMOLLM2] and history[SMOLLM2][-1]["ttft_target_s"] == 5.0


async def test_the_streams_points_move_with_the_requests_metrics_counts(gateway: Gateway) -> None:
    body = {"model": SMOLLM2, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
        for _ in range(3):
            assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
        point = (
            await points_from_stream(client, lambda p: p[SMOLLM2]["requests_per_s"]["served"] > 0)
        )[SMOLLM2]
        assert point["output_tokens_per_s"] > 0 and point["ttft_p50_s"] is not None
        # Each first token against admission's forecast for it.
        assert point["forecast_p50"] > 0 and point["forecast_p90"] >= point["forecast_p50"]
        assert "their forecast" in (await client.get("/console/")).text
        served = sum(p.requests_per_s["served"] for p in gateway.services.series.points(SMOLLM2))
        assert served > 0
        metrics = (await client.get("/metrics")).text
    line = f'vigil_requests_total{{deployment="{SMOLLM2}",outcome="length",version="{STABLE}"}} 3.0'
    assert line in metrics
