"""Which worker and version take each request, seen through the gateway: load counted
by the requests' own leases, prefix affinity, suspects avoided, canary shares, and
embeddings to a worker's embedder."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fakes import (
    FakeEmbedder,
    FakeWorkers,
    Gateway,
    ScriptedEngine,
    gateway_client,
    minilm_tokenizer,
)

from vigil.engine.bundled import MINILM, SMOLLM2
from vigil.platform.control.specs import bundled_version
from vigil.platform.forecast.costs import DecodePoint, StepCosts
from vigil.platform.slo.sli import SLI
from vigil.platform.wire.worker import EmbedResult

STABLE = bundled_version(SMOLLM2).key
CANARY = f"{SMOLLM2}@warm"
EMBED = bundled_version(MINILM).key
EMBED_CANARY = f"{MINILM}@v2"
CONFIG = f"""
[[versions]]
model = "{SMOLLM2}"
version = "warm"
artifact = "bundled:{SMOLLM2}"

[[deployments]]
name = "chat"
model = "{SMOLLM2}"
interactive = {{ max_queue = 64, max_queue_wait_s = 60 }}
slo = {{ ttft_p99_s = 60, min_tokens_per_s = 0.1 }}
canary = {{ version = "warm", weight = 10 }}

[[versions]]
model = "{MINILM}"
version = "v2"
artifact = "bundled:{MINILM}"
kind = "embed"
format = "hf"

[[deployments]]
name = "search"
model = "{MINILM}"
canary = {{ version = "v2", weight = 50 }}

[[deployments]]
name = "burst"
model = "{MINILM}"
interactive = {{ max_queue = 2, max_queue_wait_s = 30 }}
"""


COSTS = StepCosts((DecodePoint(1, 0.01),), 0.0, 0.0, 0.0002, 0.0)  # 5,000 prompt tokens/s


@pytest.fixture(scope="module")
async def gateway(tmp_path_factory, smollm2_tokenizer) -> AsyncIterator[Gateway]:  # type: ignore[no-untyped-def]
    workers = FakeWorkers()
    for worker_id in ("w1", "w2"):
        engines = {
            STABLE: ScriptedEngine(),
            CANARY: ScriptedEngine(),
            EMBED: FakeEmbedder(),
            EMBED_CANARY: FakeEmbedder(),
        }
        workers.add(worker_id, engines, costs=COSTS)
    async with gateway_client(
        tmp_path_factory.mktemp("gateway-routing"), workers, smollm2_tokenizer, config=CONFIG
    ) as (gw, _):
        yield gw


@pytest.fixture
async def client(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    assert gateway.client is not None
    yield gateway.client
    release_all(gateway)


def scripted(gateway: Gateway, worker: str, key: str) -> ScriptedEngine:
    engine = gateway.workers.workers[worker].engines[key]
    assert isinstance(engine, ScriptedEngine)
    return engine


def release_all(gateway: Gateway) -> None:
    for worker in gateway.workers.workers.values():
        for engine in worker.engines.values():
            if isinstance(engine, ScriptedEngine):
                engine.release()
                engine.auto_release = False


def answer_at_once(gateway: Gateway) -> None:
    for worker in gateway.workers.workers.values():
        for engine in worker.engines.values():
            if isinstance(engine, ScriptedEngine):
                engine.auto_release = True


def chat(text: str = "Say hi.") -> dict[str, Any]:
    return {"model": "chat", "messages": [{"role": "user", "content": text}]}


async def until(condition, timeout_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")


async def test_a_burst_is_spread_by_the_requests_in_flight(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    # Stable only: a canary turn would take one of the burst elsewhere.
    gateway.services.view.split._credit[("chat", "canary")] = -1000
    try:
        engines = [scripted(gateway, w, STABLE) for w in ("w1", "w2")]

        def queued() -> int:  # requests a worker's engine holds (after their lease opened)
            return sum(len(e.waiting) for e in engines)

        tasks = []
        for n in range(1, 7):
            tasks.append(asyncio.create_task(client.post("/v1/chat/completions", json=chat())))
            await until(lambda n=n: queued() == n)
        assert [len(e.waiting) for e in engines] == [3, 3]  # only the leases knew of them
        engines[0].release()
        await until(lambda: gateway.services.loads.num_open() == 3)
        more = asyncio.create_task(client.post("/v1/chat/completions", json=chat()))
        await until(lambda: queued() == 4)
        assert len(engines[0].waiting) == 1  # the idle one
        release_all(gateway)
        responses = await asyncio.gather(*tasks, more)
    finally:
        gateway.services.view.split._credit[("chat", "canary")] = 0
    assert {r.status_code for r in responses} == {200}


async def test_a_dead_worker_is_routed_around_at_once_and_none_left_is_a_503(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    answer_at_once(gateway)
    w1, w2 = gateway.workers.workers["w1"], gateway.workers.workers["w2"]
    w1.alive = False  # dies between heartbeats: the registry still thinks it is up
    try:
        responses = [await client.post("/v1/chat/completions", json=chat()) for _ in range(6)]
        assert {(r.status_code, r.headers["x-vigil-replica"]) for r in responses} == {(200, "w2")}
        ready = await client.get("/readyz")
        assert ready.status_code == 200  # w2 still serves every version
        w2.alive = False
        r = await client.post("/v1/chat/completions", json=chat())
        assert r.status_code == 503 and r.headers["retry-after"]
        assert r.json()["error"]["code"] in ("worker_unavailable", "model_loading")
        assert (await client.get("/readyz")).status_code == 503  # says so at once
        assert gateway.services.loads.num_open() == 0
    finally:
        w1.alive = w2.alive = True
        gateway.workers.beat()  # back at their next heartbeat
    assert (await client.post("/v1/chat/completions", json=chat())).status_code == 200


async def test_prompts_with_a_shared_start_go_where_it_is_cached(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    answer_at_once(gateway)
    system = "You are a careful assistant. " * 60  # over the 256 tokens that name a prefix
    body = lambda q: {  # noqa: E731
        "model": "chat",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": q}],
    }
    where: dict[str, set[str]] = {}  # version -> the replicas that served it
    for i in range(8):
        r = await client.post("/v1/chat/completions", json=body(f"Question {i}?"))
        where.setdefault(r.headers["x-vigil-served-by"], set()).add(r.headers["x-vigil-replica"])
    # Idle replicas: the one holding the prefix keeps it (each version's engine has its own
    # cache, so a canary turn may go elsewhere).
    assert all(len(replicas) == 1 for replicas in where.values()), where


async def test_a_ten_percent_canary_serves_exactly_one_in_ten(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    answer_at_once(gateway)
    served = Counter(
        [
            (await client.post("/v1/chat/completions", json=chat())).headers["x-vigil-served-by"]
            for _ in range(20)
        ]
    )
    assert served == {STABLE.replace("@", "/"): 18, CANARY.replace("@", "/"): 2}


async def test_embeddings_come_back_in_order_and_a_long_input_is_named(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    r = await client.post("/v1/embeddings", json={"model": MINILM, "input": ["a b", "ok"]})
    assert r.status_code == 200, r.text
    # The fake's vectors: each row's length in MiniLM tokens, [CLS] and [SEP] included.
    assert [d["embedding"] for d in r.json()["data"]] == [[4.0, 1.0], [3.0, 1.0]]
    assert r.json()["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
    assert r.headers["x-vigil-served-by"] == EMBED.replace("@", "/")
    too_long = "word " * 300  # 302 tokens, over MiniLM's 256
    one = await client.post("/v1/embeddings", json={"model": MINILM, "input": too_long})
    assert one.status_code == 400 and one.json()["error"]["param"] == "input"
    assert "'input' has 302 tokens" in one.json()["error"]["message"]
    listed = await client.post("/v1/embeddings", json={"model": MINILM, "input": ["ok", too_long]})
    assert listed.status_code == 400
    assert listed.json()["error"]["param"] == "input[1]"
    assert listed.json()["error"]["code"] == "context_length_exceeded"
    wrong = await client.post("/v1/embeddings", json={"model": "chat", "input": "hi"})
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "wrong_model_kind"


async def test_an_embedding_request_is_tokenized_once_at_the_gateway_and_sent_as_ids(
    gateway: Gateway, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokenizer = minilm_tokenizer()
    encode, encoded = tokenizer.encode, []

    def counted(text: str, max_tokens: int | None = None) -> list[int]:
        encoded.append(text)
        return encode(text, max_tokens)

    monkeypatch.setattr(tokenizer, "encode", counted)
    embedders = [gateway.workers.workers[w].engines[EMBED] for w in ("w1", "w2")]
    fakes = [e for e in embedders if isinstance(e, FakeEmbedder)]
    before = [len(e.arrived) for e in fakes]
    texts = ["a b", "ok", "a b"]
    r = await client.post("/v1/embeddings", json={"model": MINILM, "input": texts})
    assert r.status_code == 200, r.text
    assert encoded == texts  # each text once, none again
    # one call, on whichever worker the router chose (the other may hold older ones)
    new = [call for e, n in zip(fakes, before, strict=True) for call in e.arrived[n:]]
    assert new == [[encode(t) for t in texts]]  # the worker got the ids


async def test_a_burst_of_embeddings_past_the_queue_bound_is_shed_with_429(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    """'burst' lets 2 interactive requests queue on its engine: a third is shed at once
    with Retry-After, counted as a shed decision, and the first two are answered."""
    loads = gateway.services.loads
    gated = {w: GatedEmbedder() for w in ("w1", "w2")}
    kept = {w: gateway.workers.workers[w].engines[EMBED] for w in gated}
    for w, engine in gated.items():
        gateway.workers.workers[w].engines[EMBED] = engine
    body = {"model": "burst", "input": "a b"}
    try:
        held = []
        for n in (1, 2):
            held.append(asyncio.create_task(client.post("/v1/embeddings", json=body)))
            await until(lambda n=n: loads.num_open() == n)
        shed = await client.post("/v1/embeddings", json=body)
        assert shed.status_code == 429, shed.text
        assert shed.json()["error"]["code"] == "overloaded_queue_full"
        assert int(shed.headers["retry-after"]) >= 1
        for engine in gated.values():
            engine.gate.set()
        assert [r.status_code for r in await asyncio.gather(*held)] == [200, 200]
    finally:
        for w, engine in kept.items():
            gateway.workers.workers[w].engines[EMBED] = engine
    sample = gateway.services.registry.get_sample_value
    labels = {"deployment": "burst", "version": EMBED}
    shed = labels | {"decision": "shed", "reason": "queue_full"}
    admitted = labels | {"decision": "admitted", "reason": "ok"}
    assert sample("vigil_admission_decisions_total", shed) == 1
    assert sample("vigil_admission_decisions_total", admitted) == 2
    assert (await client.post("/v1/embeddings", json=body)).status_code == 200  # room again


@dataclass
class GatedEmbedder(FakeEmbedder):
    """Answers once the test opens its gate; counts the calls it took."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    calls: int = 0

    async def embed(self, token_ids: list[list[int]]) -> EmbedResult:
        self.calls += 1
        await self.gate.wait()
        return await super().embed(token_ids)


async def test_an_embedding_in_flight_counts_on_its_worker_so_the_next_goes_elsewhere(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    """Embeddings are placed by the router from the load book, like generations: one
    held on a worker steers the next to the other, and both leave the book when done."""
    loads = gateway.services.loads
    gated = {w: GatedEmbedder() for w in ("w1", "w2")}
    kept = {w: gateway.workers.workers[w].engines[EMBED] for w in gated}
    for w, engine in gated.items():
        gateway.workers.workers[w].engines[EMBED] = engine
    try:
        body = {"model": MINILM, "input": "a b"}
        first = asyncio.create_task(client.post("/v1/embeddings", json=body))
        await until(lambda: loads.num_open() == 1)
        held = next(iter(loads.replica_counts(EMBED)))
        second = asyncio.create_task(client.post("/v1/embeddings", json=body))
        await until(lambda: loads.num_open() == 2)
        assert {w: e.calls for w, e in gated.items()} == {"w1": 1, "w2": 1}
        assert set(loads.replica_counts(EMBED)) == {"w1", "w2"} and held in gated
        for engine in gated.values():
            engine.gate.set()
        answers = await asyncio.gather(first, second)
        assert [r.status_code for r in answers] == [200, 200]
        assert answers[0].headers["x-request-id"].startswith("embd-")
        assert loads.num_open() == 0
    finally:
        for w, engine in kept.items():
            gateway.workers.workers[w].engines[EMBED] = engine


async def test_an_embedding_deployment_splits_traffic_with_its_canary_and_counts_slis(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    """An embedding model is a deployment like a chat model: canary share, SLIs per
    version, listed with the others."""
    answers = [
        await client.post("/v1/embeddings", json={"model": "search", "input": "a b"})
        for _ in range(10)
    ]
    assert {r.status_code for r in answers} == {200}
    served = Counter(r.headers["x-vigil-served-by"] for r in answers)
    assert served == {EMBED.replace("@", "/"): 5, EMBED_CANARY.replace("@", "/"): 5}
    status = gateway.services.slos.status("search")
    assert status is not None
    assert {v: counts[SLI.TTFT] for v, counts in status.versions.items()} == {
        EMBED: (5, 5),
        EMBED_CANARY: (5, 5),
    }
    assert status.slis[SLI.AVAILABILITY].total == 10
    models = (await client.get("/v1/models")).json()["data"]
    assert {"chat", "search", MINILM} <= {m["id"] for m in models}
    wrong = await client.post("/v1/chat/completions", json=chat() | {"model": "search"})
    assert wrong.status_code == 400 and "/v1/embeddings" in wrong.json()["error"]["message"]
