"""Rollouts through the gateway: a promoted version takes the traffic once ready, and a
stable version that then fails to load everywhere (its file gone after a restart, say)
leaves the deployment served by the version it replaced, not answering 503."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from fakes import FakeWorkers, Gateway, ScriptedEngine, running_gateway

from vigil.engine.bundled import SMOLLM2
from vigil.platform.control.deployments.records import VersionKey
from vigil.platform.control.specs import bundled_version

STABLE = bundled_version(SMOLLM2).key
WARM = f"{SMOLLM2}@warm"
CHAT = {"model": SMOLLM2, "messages": [{"role": "user", "content": "Say hi."}]}


@pytest.fixture
async def gateway(tmp_path, smollm2_tokenizer) -> AsyncIterator[Gateway]:  # type: ignore[no-untyped-def]
    workers = FakeWorkers()
    engines = {STABLE: ScriptedEngine(auto_release=True), WARM: ScriptedEngine(auto_release=True)}
    workers.add("w1", engines)
    async with running_gateway(tmp_path, workers, smollm2_tokenizer) as gw:
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
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
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
