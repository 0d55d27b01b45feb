"""Shadow traffic through the gateway: a mirrored share of a deployment's requests goes to
its shadow version at batch priority, its answers are thrown away, and no client, count or
SLI of the deployment sees it; under load, and when the shadow fails, mirrors are dropped
and counted, never raised."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from fakes import FakeWorkers, Gateway, ScriptedEngine, gateway_client

from vigil.engine.bundled import SMOLLM2
from vigil.engine.request import Priority
from vigil.platform.control.deployments.records import VersionKey
from vigil.platform.control.specs import bundled_version
from vigil.platform.gateway.shadow import MAX_IN_FLIGHT
from vigil.platform.slo.sli import SLI
from vigil.platform.slo.tracker import ALL_VERSIONS

STABLE = bundled_version(SMOLLM2).key
SHADOW = f"{SMOLLM2}@next"
CHAT = {"model": SMOLLM2, "messages": [{"role": "user", "content": "Say hi."}]}


@pytest.fixture
async def gateway(tmp_path, smollm2_tokenizer) -> AsyncIterator[Gateway]:  # type: ignore[no-untyped-def]
    workers = FakeWorkers()
    engines = {STABLE: ScriptedEngine(auto_release=True), SHADOW: ScriptedEngine()}
    workers.add("w1", engines)
    async with gateway_client(tmp_path, workers, smollm2_tokenizer) as (gw, _):
        plane = gw.services.plane
        await plane.versions.register_version(SMOLLM2, "next", f"bundled:{SMOLLM2}", actor="ops")
        yield gw


def engine(gateway: Gateway, key: str) -> ScriptedEngine:
    found = gateway.workers.workers["w1"].engines[key]
    assert isinstance(found, ScriptedEngine)
    return found


def sample(gateway: Gateway, name: str, **labels: str) -> float:
    value = gateway.services.registry.get_sample_value(name, labels)
    return value or 0.0


async def until(condition, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(timeout_s / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


async def test_a_shadow_gets_its_share_mirrored_and_no_client_sees_it(gateway: Gateway) -> None:
    plane = gateway.services.plane
    await plane.deployments.set_shadow(SMOLLM2, VersionKey(SMOLLM2, "next"), 50, actor="ops")
    shadow = engine(gateway, SHADOW)
    shadow.auto_release = True
    client = gateway.client
    await until(lambda: bool(gateway.services.view.workers.serving(SHADOW)))
    for _ in range(10):
        r = await client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 200
        assert r.headers["x-vigil-served-by"] == STABLE.replace("@", "/")
        assert r.json()["choices"][0]["message"]["content"] == "ok ok ok "
    await until(lambda: len(shadow.arrived) == 5 and gateway.services.loads.num_open() == 0)
    assert all(r.priority is Priority.BATCH for r in shadow.arrived)
    assert all(r.request_id.endswith("-shadow") for r in shadow.arrived)
    ended = "vigil_requests_total"
    assert sample(gateway, ended, deployment=SMOLLM2, version=STABLE, outcome="length") == 10
    assert sample(gateway, ended, deployment=SMOLLM2, version=SHADOW, outcome="length") == 0
    shadow_label = f"{SMOLLM2}:shadow"
    assert sample(gateway, ended, deployment=shadow_label, version=SHADOW, outcome="length") == 5
    status = gateway.services.slos.status(SMOLLM2)
    assert status is not None
    assert status.versions[SHADOW][SLI.TTFT][1] == 5  # judged under its own version
    assert status.slis[SLI.TTFT].total == 10  # the deployment's SLIs: its clients' only
    assert ALL_VERSIONS not in status.versions


async def test_mirrors_are_dropped_while_the_shadow_is_busy_and_clients_never_wait(
    gateway: Gateway,
) -> None:
    plane = gateway.services.plane
    await plane.deployments.set_shadow(SMOLLM2, VersionKey(SMOLLM2, "next"), 100, actor="ops")
    shadow = engine(gateway, SHADOW)  # holds every mirror in its queue
    client = gateway.client
    await until(lambda: bool(gateway.services.view.workers.serving(SHADOW)))
    for _ in range(MAX_IN_FLIGHT + 3):
        r = await client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 200

    # One mirror waits in the shadow's queue; the others found it busy. A mirror is
    # a task of its own, so the last one may count its drop after its client's
    # answer: wait for the count, then hold it to exactly that.
    def busy() -> float:
        labels = {"deployment": f"{SMOLLM2}:shadow", "version": SHADOW, "why": "busy"}
        return sample(gateway, "vigil_shadow_dropped_total", **labels)

    await until(lambda: len(shadow.arrived) == 1 and busy() >= MAX_IN_FLIGHT + 2)
    assert len(shadow.arrived) == 1 and busy() == MAX_IN_FLIGHT + 2
    shadow.release()
    await until(lambda: gateway.services.generation.shadows.in_flight(SMOLLM2) == 0)
    # A shadow whose worker reports it failed is not mirrored to at all.
    gateway.workers.workers["w1"].failed[SHADOW] = "out of memory"
    await until(lambda: not gateway.services.view.workers.serving(SHADOW))
    r = await client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200
    await until(
        lambda: (
            sample(
                gateway,
                "vigil_shadow_dropped_total",
                deployment=f"{SMOLLM2}:shadow",
                version=SHADOW,
                why="not_ready",
            )
            == 1
        )
    )
    assert len(shadow.arrived) == 1
