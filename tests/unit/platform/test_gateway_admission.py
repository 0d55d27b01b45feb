"""The gateway's protections seen from the client, on a real HTTP server in process with
scripted engines behind it (each request waits until the test lets it start): API keys
and priorities, caps, the long-prompt pool, queue limits, fallback, SLO shedding and
queue timeouts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fakes import FakeWorkers, Gateway, ScriptedEngine, gateway_client

from vigil.engine.bundled import SMOLLM2
from vigil.engine.request import Priority
from vigil.platform.control.specs import bundled_version
from vigil.platform.forecast.costs import DecodePoint, StepCosts

STABLE = bundled_version(SMOLLM2).key
LONG_POOL = STABLE + "#long"
LITE, STRICT, TIMEOUT = (f"{SMOLLM2}@{v}" for v in ("lite", "strict", "timeout"))
CONFIG = """
[[versions]]
model = "smollm2-135m-instruct"
version = "lite"
artifact = "bundled:smollm2-135m-instruct"

[[versions]]
model = "smollm2-135m-instruct"
version = "strict"
artifact = "bundled:smollm2-135m-instruct"

[[versions]]
model = "smollm2-135m-instruct"
version = "timeout"
artifact = "bundled:smollm2-135m-instruct"

[[deployments]]
name = "chat"
model = "smollm2-135m-instruct"
max_tokens = 64
interactive = { max_queue = 4, max_queue_wait_s = 60 }
batch = { max_queue = 1, max_queue_wait_s = 60 }
slo = { ttft_p99_s = 60, min_tokens_per_s = 0.1 }
fallback = { deployment = "chat-lite", trigger = "queue_wait", threshold_s = 0.3 }
long_prompt_pool = { min_prompt_tokens = 300, max_queue = 2, max_num_seqs = 1 }

[[deployments]]
name = "chat-lite"
model = "smollm2-135m-instruct"
version = "lite"
max_prompt_tokens = 64
max_tokens = 16
slo = { ttft_p99_s = 60, min_tokens_per_s = 0.1 }

[[deployments]]
name = "chat-strict"
model = "smollm2-135m-instruct"
version = "strict"
slo = { ttft_p99_s = 0.001, min_tokens_per_s = 0.1 }

[[deployments]]
name = "chat-timeout"
model = "smollm2-135m-instruct"
version = "timeout"
interactive = { max_queue = 8, max_queue_wait_s = 0.3 }
slo = { ttft_p99_s = 60, min_tokens_per_s = 0.1 }
"""


@pytest.fixture(scope="module")
async def gateway(tmp_path_factory, smollm2_tokenizer) -> AsyncIterator[Gateway]:  # type: ignore[no-untyped-def]
    workers = FakeWorkers()
    engines = {key: ScriptedEngine() for key in (STABLE, LONG_POOL, LITE, STRICT, TIMEOUT)}
    costs = StepCosts((DecodePoint(1, 0.01),), 0.0, 0.0, 0.001, 0.0)  # a prompt token 1 ms
    workers.add("w1", engines, costs=costs)
    data_dir = tmp_path_factory.mktemp("gateway-admission")
    async with gateway_client(
        data_dir, workers, smollm2_tokenizer, config=CONFIG, auth="keys", sse_keepalive_s=0.2
    ) as (gw, _):
        keys = gw.services.plane.keys
        gw.keys = {  # type: ignore[attr-defined]
            "app": (await keys.create("app", actor="test"))[1],
            "batch": (await keys.create("batch-jobs", Priority.BATCH, actor="test"))[1],
            "lite-only": (await keys.create("lite-only", models=["chat-lite"], actor="test"))[1],
            "limited": (await keys.create("limited", rate_limit_per_minute=2, actor="test"))[1],
        }
        yield gw


@pytest.fixture
async def client(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    assert gateway.client is not None
    yield gateway.client
    for engine in gateway.workers.workers["w1"].engines.values():
        assert isinstance(engine, ScriptedEngine)
        engine.release()  # nothing a test held back outlives it
    for _ in range(100):
        if gateway.services.loads.num_open() == 0:
            break
        await asyncio.sleep(0.01)
    assert gateway.services.loads.num_open() == 0


def engine(gateway: Gateway, key: str) -> ScriptedEngine:
    found = gateway.workers.workers["w1"].engines[key]
    assert isinstance(found, ScriptedEngine)
    return found


def chat(model: str, text: str = "Say hi.", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


def auth(gateway: Gateway, key: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {gateway.keys[key]}", **headers}  # type: ignore[attr-defined]


async def held(
    client: httpx.AsyncClient, gateway: Gateway, key: str, body: dict[str, Any], on: str, **h: str
) -> asyncio.Task[httpx.Response]:
    """A request sent and waiting in engine `on`'s queue."""
    scripted = engine(gateway, on)
    before = len(scripted.arrived)
    task = asyncio.create_task(
        client.post("/v1/chat/completions", json=body, headers=auth(gateway, key, **h))
    )
    for _ in range(500):
        if len(scripted.arrived) > before or task.done():
            break
        await asyncio.sleep(0.01)
    assert not task.done(), task.result().text
    return task


def error_of(response: httpx.Response) -> dict[str, Any]:
    return response.json()["error"]


async def test_missing_and_wrong_keys_are_401_and_every_answer_has_a_request_id(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    missing = await client.post("/v1/chat/completions", json=chat("chat"))
    assert missing.status_code == 401 and error_of(missing)["code"] == "missing_api_key"
    assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong = await client.get("/v1/models", headers={"Authorization": "Bearer vgl_nope"})
    assert wrong.status_code == 401 and error_of(wrong)["code"] == "invalid_api_key"
    assert missing.headers["x-request-id"] and wrong.headers["x-request-id"]


async def test_key_limited_to_other_models_is_403_and_sees_only_its_own(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    r = await client.post(
        "/v1/chat/completions", json=chat("chat"), headers=auth(gateway, "lite-only")
    )
    assert r.status_code == 403 and error_of(r)["code"] == "model_not_allowed"
    models = await client.get("/v1/models", headers=auth(gateway, "lite-only"))
    assert [m["id"] for m in models.json()["data"]] == ["chat-lite"]


async def test_rate_limited_key_gets_429_with_retry_after(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    codes = [
        (await client.get("/v1/models", headers=auth(gateway, "limited"))).status_code
        for _ in range(3)
    ]
    assert codes == [200, 200, 429]
    r = await client.get("/v1/models", headers=auth(gateway, "limited"))
    assert error_of(r)["code"] == "rate_limit_exceeded" and int(r.headers["retry-after"]) >= 1


async def test_response_names_the_version_that_served_it(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    engine(gateway, STABLE).auto_release = True
    try:
        r = await client.post(
            "/v1/chat/completions", json=chat("chat"), headers=auth(gateway, "app")
        )
    finally:
        engine(gateway, STABLE).auto_release = False
    assert r.status_code == 200, r.text
    assert (
        r.json()["model"] == "chat" and r.json()["choices"][0]["message"]["content"] == "ok ok ok "
    )
    assert r.headers["x-vigil-served-by"] == STABLE.replace("@", "/")
    assert r.headers["x-request-id"] == r.json()["id"]


async def test_caps_give_context_length_exceeded_with_the_limits(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    r = await client.post(
        "/v1/chat/completions", json=chat("chat", max_tokens=100), headers=auth(gateway, "app")
    )
    assert r.status_code == 400 and error_of(r)["code"] == "context_length_exceeded"
    assert error_of(r)["param"] == "max_tokens" and "64" in error_of(r)["message"]
    r = await client.post(
        "/v1/chat/completions", json=chat("chat-lite", "word " * 100), headers=auth(gateway, "app")
    )
    assert r.status_code == 400 and error_of(r)["code"] == "context_length_exceeded"
    assert error_of(r)["param"] == "messages" and "64" in error_of(r)["message"]
    assert gateway.services.loads.num_open() == 0  # refused before a lease was opened


async def test_long_prompts_go_to_their_own_pool(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    long_text = "Summarise: " + "the quick brown fox jumps over the lazy dog. " * 40
    long = await held(client, gateway, "app", chat("chat", long_text), on=LONG_POOL)
    short = await held(client, gateway, "app", chat("chat"), on=STABLE)
    assert len(engine(gateway, LONG_POOL).arrived[-1].prompt_ids) >= 300
    assert len(engine(gateway, STABLE).arrived[-1].prompt_ids) < 300
    engine(gateway, STABLE).release()
    assert (await short).status_code == 200  # the long one is still waiting in its pool
    assert not long.done()
    engine(gateway, LONG_POOL).release()
    assert (await long).status_code == 200


async def test_batch_queue_full_is_429_with_retry_after(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    first = await held(client, gateway, "batch", chat("chat"), on=STABLE)
    r = await client.post("/v1/chat/completions", json=chat("chat"), headers=auth(gateway, "batch"))
    assert r.status_code == 429 and error_of(r)["code"] == "overloaded_queue_full"
    assert int(r.headers["retry-after"]) >= 1
    engine(gateway, STABLE).release()
    assert (await first).status_code == 200


async def test_priority_header_lowers_an_interactive_key_to_batch(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    first = await held(
        client, gateway, "app", chat("chat"), on=STABLE, **{"x-vigil-priority": "batch"}
    )
    assert engine(gateway, STABLE).arrived[-1].priority is Priority.BATCH
    lowered = await client.post(
        "/v1/chat/completions",
        json=chat("chat"),
        headers=auth(gateway, "app", **{"x-vigil-priority": "batch"}),
    )
    assert lowered.status_code == 429  # the batch queue (1) is full
    engine(gateway, STABLE).release()
    assert (await first).status_code == 200


async def test_interactive_traffic_falls_back_when_the_queue_waits_too_long(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    engine(gateway, LITE).auto_release = True
    try:
        first = await held(client, gateway, "app", chat("chat"), on=STABLE)
        await asyncio.sleep(0.35)  # the oldest queued interactive request passes 0.3 s
        r = await client.post(
            "/v1/chat/completions", json=chat("chat"), headers=auth(gateway, "app")
        )
    finally:
        engine(gateway, LITE).auto_release = False
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "chat-lite" and r.headers["x-vigil-fallback-from"] == "chat"
    assert r.headers["x-vigil-served-by"] == LITE.replace("@", "/")
    engine(gateway, STABLE).release()
    assert "x-vigil-fallback-from" not in (await first).headers
    metrics = (await client.get("/metrics")).text
    assert (
        'vigil_admission_decisions_total{decision="fallback",deployment="chat",reason="queue_wait",'
        f'version="{STABLE}"}}' in metrics
    )


async def test_request_that_would_miss_its_ttft_target_is_shed_at_once(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    # The engine is idle: the first request is one prefill away, whatever its forecast
    # against a 1 ms target says.
    first = await held(client, gateway, "app", chat("chat-strict"), STRICT)
    r = await client.post(
        "/v1/chat/completions", json=chat("chat-strict"), headers=auth(gateway, "app")
    )
    assert r.status_code == 429 and error_of(r)["code"] == "overloaded_slo_ttft"
    assert "forecast time to first token" in error_of(r)["message"]
    assert len(engine(gateway, STRICT).arrived) == 1  # the second never sent to a worker
    metrics = (await client.get("/metrics")).text
    shed = f'vigil_requests_total{{deployment="chat-strict",outcome="shed",version="{STRICT}"}}'
    assert f"{shed} 1.0" in metrics
    engine(gateway, STRICT).release()
    assert (await first).status_code == 200


async def test_request_not_started_within_its_max_wait_times_out_with_503(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    r = await client.post(
        "/v1/chat/completions", json=chat("chat-timeout"), headers=auth(gateway, "app")
    )
    assert r.status_code == 503 and error_of(r)["code"] == "queue_timeout"
    assert r.headers["retry-after"] == "1" and "waited 0.3 s" in error_of(r)["message"]
    body = chat("chat-timeout", stream=True)
    async with client.stream(
        "POST", "/v1/chat/completions", json=body, headers=auth(gateway, "app")
    ) as streamed:
        assert streamed.status_code == 200  # the stream began before the wait ran out
        data = [
            x.removeprefix("data: ") async for x in streamed.aiter_lines() if x.startswith("data: ")
        ]
    assert data[-1] == "[DONE]"
    assert json.loads(data[-2])["error"]["code"] == "queue_timeout"
    metrics = (await client.get("/metrics")).text
    timed_out = f'deployment="chat-timeout",outcome="timed_out",version="{TIMEOUT}"'
    assert f"vigil_requests_total{{{timed_out}}} 2.0" in metrics


async def test_a_key_revoked_through_this_gateway_stops_working_at_once(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    _, plaintext = await gateway.services.plane.keys.create("short-lived", actor="test")
    headers = {"Authorization": f"Bearer {plaintext}"}
    assert (await client.get("/v1/models", headers=headers)).status_code == 200  # now cached
    await gateway.services.plane.keys.revoke("short-lived", actor="test")
    r = await client.get("/v1/models", headers=headers)
    assert r.status_code == 401 and error_of(r)["code"] == "invalid_api_key"


async def test_worker_calls_need_the_worker_token(client: httpx.AsyncClient) -> None:
    for token in ("", "Bearer wrong", "Bearer worker-toke", "bearer worker-token"):
        r = await client.post("/internal/workers/w9/heartbeat", json={"slots": []},
                              headers={"Authorization": token})  # fmt: skip
        assert r.status_code == 401, token
    r = await client.post("/internal/workers/w9/heartbeat", json={"slots": []},
                          headers={"Authorization": "Bearer worker-token"})  # fmt: skip
    assert r.status_code == 404  # the right token; a worker this gateway does not know


async def test_readiness_names_a_failed_version_without_its_error(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    worker = gateway.workers.workers["w1"]
    worker.failed[LITE] = "could not open /srv/secret/models/lite.gguf"
    gateway.workers.beat()
    try:
        ready = await client.get("/readyz")
        assert ready.json()["versions"][LITE] == "failed"
        assert "/srv/secret" not in ready.text
    finally:
        del worker.failed[LITE]
        gateway.workers.beat()


async def test_with_keys_the_console_needs_a_session(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    anonymous = await client.get("/console/")
    assert anonymous.status_code == 303
    assert anonymous.headers["location"] == "/console/login?next=/console/"
    assert (await client.get("/console/stream")).status_code == 401
    # The console takes sessions only: Basic credentials, which a browser would resend by
    # itself, open nothing there (scripts use /api/admin).
    await gateway.services.plane.users.create("watcher", "a long enough password", actor="test")
    basic = await client.get("/console/", auth=("watcher", "a long enough password"))
    assert basic.status_code == 303


async def test_a_request_that_does_not_fit_the_fallback_stays_and_says_so(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    first = await held(client, gateway, "app", chat("chat"), on=STABLE)
    await asyncio.sleep(0.35)  # the fallback is called for, but chat-lite caps max_tokens at 16
    stays = await held(client, gateway, "app", chat("chat", max_tokens=40), on=STABLE)
    engine(gateway, STABLE).release()
    r = await stays
    assert r.status_code == 200, r.text  # not a 400 from the fallback's limits
    assert r.json()["model"] == "chat" and "x-vigil-fallback-from" not in r.headers
    assert r.headers["x-vigil-fallback-skipped"] == "chat-lite: context_length_exceeded"
    assert (await first).status_code == 200
