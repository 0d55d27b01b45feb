"""Rollouts through the gateway: a promoted version takes the traffic once ready, and a
stable version that then fails to load everywhere (its file gone after a restart, say)
leaves the deployment served by the version it replaced, not answering 503."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from fakes import FakeWorkers, Gateway, ScriptedEngine, gateway_client

from vigil.engine.bundled import SMOLLM2
from vigil.platform.control.deployments.records import VersionKey
from vigil.platform.control.specs import SLOTargets, bundled_version

STABLE = bundled_version(SMOLLM2).key
WARM = f"{SMOLLM2}@warm"
CHAT = {"model": SMOLLM2, "messages": [{"role": "user", "content": "Say hi."}]}


@pytest.fixture
async def gateway(tmp_path, smollm2_tokenizer) -> AsyncIterator[Gateway]:  # type: ignore[no-untyped-def]
    workers = FakeWorkers()
    engines = {STABLE: ScriptedEngine(auto_release=True), WARM: ScriptedEngine(auto_release=True)}
    workers.add("w1", engines)
    async with gateway_client(tmp_path, workers, smollm2_tokenizer) as (gw, _):
        yield gw


async def served_by(client: httpx.AsyncClient) -> str:
    r = await client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200, r.text
    return r.headers["x-vigil-served-by"]


async def until(condition, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(timeout_s / 0.05)):
        if await condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


async def test_a_promoted_version_that_fails_everywhere_hands_back_to_the_one_before(
    gateway: Gateway,
) -> None:
    plane = gateway.services.plane
    client = gateway.client
    assert await served_by(client) == STABLE.replace("@", "/")
    await plane.versions.register_version(SMOLLM2, "warm", f"bundled:{SMOLLM2}", actor="ops")
    await plane.deployments.set_canary(SMOLLM2, VersionKey(SMOLLM2, "warm"), 0, actor="ops")

    async def warm_ready() -> bool:
        return (await plane.versions.get_version(SMOLLM2, "warm")).status == "ready"

    await until(warm_ready)  # recorded by the gateway at a heartbeat
    await plane.deployments.promote(SMOLLM2, actor="ops")
    assert await served_by(client) == WARM.replace("@", "/")

    gateway.workers.workers["w1"].failed[WARM] = "no such file: /models/warm.gguf"

    async def back_on_stable() -> bool:  # 503s until the gateway sees the failure
        r = await client.post("/v1/chat/completions", json=CHAT)
        return r.headers.get("x-vigil-served-by") == STABLE.replace("@", "/")

    await until(back_on_stable)
    ready = (await client.get("/readyz")).json()
    assert (ready["versions"][STABLE], ready["versions"][WARM]) == ("ready", "failed")
    record = await plane.deployments.get(SMOLLM2)
    assert record.spec.stable.key == WARM  # the operator's choice stands, unserved


async def test_a_slow_canary_is_rolled_back_by_the_system_and_its_requests_finish(
    tmp_path, smollm2_tokenizer
) -> None:  # type: ignore[no-untyped-def]
    slow = ScriptedEngine(token_gap_s=0.15)  # 3 tokens: under 10 tokens/s after the first
    workers = FakeWorkers()
    workers.add("w1", {STABLE: ScriptedEngine(auto_release=True), WARM: slow})
    async with gateway_client(tmp_path, workers, smollm2_tokenizer) as (gateway, client):
        plane = gateway.services.plane
        slo = SLOTargets(min_tokens_per_s=20.0, rollback_min_requests=4, rollback_margin=0.05)
        await plane.deployments.set_slo(SMOLLM2, slo, actor="ops")
        await plane.versions.register_version(SMOLLM2, "warm", f"bundled:{SMOLLM2}", actor="ops")

        async def warm_ready() -> bool:
            return (await plane.versions.get_version(SMOLLM2, "warm")).status == "ready"

        await plane.deployments.set_canary(SMOLLM2, VersionKey(SMOLLM2, "warm"), 0, actor="ops")
        await until(warm_ready)
        await plane.deployments.set_weight(SMOLLM2, 50, actor="ops")
        answers = [
            asyncio.create_task(client.post("/v1/chat/completions", json=CHAT)) for _ in range(10)
        ]

        async def canary_queued() -> bool:
            return len(slow.waiting) == 5

        await until(canary_queued)  # stable's five are served; the canary's wait
        slow.release(4)  # four slow ones end: enough to judge the canary

        async def rolled_back() -> bool:
            return (await plane.deployments.get(SMOLLM2)).spec.canary is None

        await until(rolled_back)
        assert len(slow.waiting) == 1  # still on the canary's engine
        slow.release()  # the request it had finishes there
        done = await asyncio.gather(*answers)
        assert [r.status_code for r in done] == [200] * 10
        via = [r.headers["x-vigil-served-by"] for r in done]
        assert via.count(WARM.replace("@", "/")) == 5
        assert await served_by(client) == STABLE.replace("@", "/")
        [entry, *_] = await plane.audit.list("deployment", SMOLLM2)
        assert (entry.actor, entry.action) == ("system", "deployment.rollback")
        assert entry.after is not None and "tokens_per_s" in entry.after["reason"]
        [decision] = await plane.alerts.decisions(SMOLLM2, ["rollback"])
        assert decision.details["canary_requests"] == 4
