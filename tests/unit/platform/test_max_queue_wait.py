"""`vigil serve --max-queue-wait`: the interactive wait of every deployment made without
limits of its own (the bundled ones, one created over the admin API), batch waiting 4
times as long; a request not started by then gets 503 queue_timeout."""

from __future__ import annotations

import base64

from fakes import FakeWorkers, ScriptedEngine, gateway_client

from vigil.engine.bundled import SMOLLM2
from vigil.platform.control.access.records import Role
from vigil.platform.control.specs import bundled_version
from vigil.platform.forecast.costs import DecodePoint, StepCosts

STABLE = bundled_version(SMOLLM2)
COSTS = StepCosts((DecodePoint(1, 0.01),), 0.0, 0.0, 0.001, 0.0)
WAITS = {"interactive": {"max_queue": 64, "max_queue_wait_s": 0.3}}
WAITS["batch"] = {"max_queue": 256, "max_queue_wait_s": 1.2}


async def test_deployments_without_limits_wait_max_queue_wait_then_time_out(
    tmp_path,
    smollm2_tokenizer,  # type: ignore[no-untyped-def]
) -> None:
    workers = FakeWorkers()
    workers.add("w1", {STABLE.key: ScriptedEngine()}, costs=COSTS)  # never lets one start
    async with gateway_client(
        tmp_path, workers, smollm2_tokenizer, models=(SMOLLM2,), max_queue_wait_s=0.3
    ) as (gw, client):
        chat = {"model": SMOLLM2, "messages": [{"role": "user", "content": "Hi"}]}
        r = await client.post("/v1/chat/completions", json=chat)
        assert r.status_code == 503, r.text
        error = r.json()["error"]
        assert error["code"] == "queue_timeout" and "waited 0.3 s" in error["message"]

        await gw.services.plane.users.create("ops", "ops password", Role.OPERATOR, actor="t")
        auth = base64.b64encode(b"ops:ops password").decode()
        headers = {"Authorization": f"Basic {auth}"}
        seeded = await client.get(f"/api/admin/deployments/{SMOLLM2}", headers=headers)
        assert seeded.json()["limits"] == WAITS
        body = {"name": "chat", "model": SMOLLM2, "version": STABLE.version}
        created = await client.post("/api/admin/deployments", json=body, headers=headers)
        assert created.status_code == 201, created.text
        assert created.json()["limits"] == WAITS
