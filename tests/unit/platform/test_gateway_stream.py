"""One request through the whole gateway (a real HTTP server, in process) to a real
engine on a tiny random-weight model: OpenAI's bodies and stream, headers, metrics, the
lease closed however the request ends. No model load, no subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fakes import FakeWorkers, Gateway, ScriptedEngine, running_gateway, tiny_engine

from vigil.engine import llm_engine
from vigil.engine.bundled import SMOLLM2
from vigil.engine.tokenizer import Tokenizer
from vigil.platform.control.specs import bundled_version
from vigil.platform.gateway import prompt
from vigil.platform.worker import server

KEY = bundled_version(SMOLLM2).key
CHAT = {
    "model": SMOLLM2,
    "messages": [{"role": "user", "content": "What is the capital of France?"}],
    "temperature": 0,
    "max_tokens": 6,
    "ignore_eos": True,
}


@pytest.fixture(scope="module")
async def gateway(tmp_path_factory, tiny_lm, smollm2_tokenizer) -> AsyncIterator[Gateway]:  # type: ignore[no-untyped-def]
    engine = tiny_engine(tiny_lm)
    engine.start()
    workers = FakeWorkers()
    workers.add("w1", {KEY: engine})
    data_dir: Path = tmp_path_factory.mktemp("gateway-stream")
    try:
        async with running_gateway(data_dir, workers, smollm2_tokenizer) as gw:
            yield gw
    finally:
        engine.stop()


async def until(condition, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")


async def sse(response: httpx.Response) -> list[dict | str]:
    events: list[dict | str] = []
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


async def test_streamed_chat_is_openais_chunks_and_equals_the_whole_answer(
    gateway: Gateway,
) -> None:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
        whole = await client.post("/v1/chat/completions", json=CHAT)
        body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
        async with client.stream("POST", "/v1/chat/completions", json=body) as streamed:
            assert streamed.headers["content-type"].startswith("text/event-stream")
            events = await sse(streamed)
    assert whole.status_code == 200, whole.text
    answer = whole.json()
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == 6 and answer["model"] == SMOLLM2
    assert whole.headers["x-request-id"] == answer["id"] and answer["id"].startswith("chatcmpl-")
    assert whole.headers["x-vigil-served-by"] == KEY.replace("@", "/")
    assert whole.headers["x-vigil-replica"] == "w1"
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if isinstance(e, dict)]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == answer["choices"][0]["message"]["content"]  # greedy: the same tokens
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == answer["usage"]


async def test_one_streamed_chat_is_tokenized_once_and_fitted_to_the_context_once(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every call of the context rule and of the tokenizer in this process (gateway,
    worker link and engine alike) is counted; the engine's own check of its memory is
    the engine's, and is counted apart."""
    calls: dict[str, int] = {"fit": 0, "engine_check": 0, "encode": 0, "render": 0}

    def counted(name: str, fn):  # type: ignore[no-untyped-def]
        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(prompt, "fit_request", counted("fit", prompt.fit_request))
    monkeypatch.setattr(llm_engine, "fit_request", counted("engine_check", llm_engine.fit_request))
    monkeypatch.setattr(Tokenizer, "encode", counted("encode", Tokenizer.encode))
    monkeypatch.setattr(Tokenizer, "render_chat", counted("render", Tokenizer.render_chat))
    assert not any(hasattr(server, name) for name in ("fit_request", "ContextLimit"))
    body = {**CHAT, "stream": True}
    async with (
        httpx.AsyncClient(base_url=gateway.url, timeout=30) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as streamed,
    ):
        assert streamed.status_code == 200
        events = await sse(streamed)
    assert events[-1] == "[DONE]"
    assert calls == {"fit": 1, "engine_check": 1, "encode": 1, "render": 1}


async def test_a_completion_of_token_ids_and_the_metrics_it_leaves(gateway: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
        before = (await client.get("/metrics")).text
        r = await client.post(
            "/v1/completions",
            json={"model": SMOLLM2, "prompt": [1, 2, 3], "max_tokens": 4, "ignore_eos": True},
        )
        after = (await client.get("/metrics")).text
    assert r.status_code == 200 and r.json()["id"].startswith("cmpl-")
    assert r.json()["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}

    def sample(text: str, name: str) -> float:
        line = next((x for x in text.splitlines() if x.startswith(name)), None)
        return float(line.rsplit(" ", 1)[1]) if line else 0.0

    series = f'{{deployment="{SMOLLM2}",version="{KEY}"'
    assert (
        sample(after, f"vigil_generation_tokens_total{series}")
        - sample(before, f"vigil_generation_tokens_total{series}")
        == 4
    )
    length = f'vigil_requests_total{{deployment="{SMOLLM2}",outcome="length",version="{KEY}"}}'
    assert sample(after, length) - sample(before, length) == 1
    ttft = f"vigil_time_to_first_token_seconds_count{series}}}"
    assert sample(after, ttft) - sample(before, ttft) == 1
    assert gateway.services.loads.num_open() == 0


async def test_a_client_that_leaves_mid_stream_aborts_the_request(gateway: Gateway) -> None:
    long = {**CHAT, "max_tokens": 2000, "stream": True}
    client = httpx.AsyncClient(base_url=gateway.url, timeout=30)
    async with client, client.stream("POST", "/v1/chat/completions", json=long) as r:
        async for line in r.aiter_lines():
            if '"content":"' in line and '"content":""' not in line:
                break  # the first token: leave
    for _ in range(100):
        if gateway.services.loads.num_open() == 0:
            break
        await asyncio.sleep(0.02)
    assert gateway.services.loads.num_open() == 0
    engine = gateway.workers.workers["w1"].engines[KEY]
    for _ in range(100):
        if engine.stats().num_running == 0:
            break
        await asyncio.sleep(0.02)
    assert engine.stats().num_running == 0  # aborted in the engine, not run to 2000 tokens
    async with httpx.AsyncClient(base_url=gateway.url) as client:
        metrics = (await client.get("/metrics")).text
    assert (
        f'vigil_requests_total{{deployment="{SMOLLM2}",outcome="abort",version="{KEY}"}}' in metrics
    )


async def test_a_client_that_gives_up_on_a_whole_answer_aborts_it_too(gateway: Gateway) -> None:
    engine = gateway.workers.workers["w1"].engines[KEY]
    body = {**CHAT, "max_tokens": 3000}
    before = aborted(gateway)
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
        sent = asyncio.create_task(client.post("/v1/chat/completions", json=body))
        await until(lambda: engine.stats().num_running == 1)
        sent.cancel()  # the client closes its connection without reading an answer
        with contextlib.suppress(asyncio.CancelledError):
            await sent
    await until(lambda: engine.stats().num_running == 0 and gateway.services.loads.num_open() == 0)
    assert aborted(gateway) == before + 1  # not run on to its 3,000 tokens ("length")


def aborted(gateway: Gateway) -> float:
    """The requests to SMOLLM2 that ended because their client left."""
    value = gateway.services.registry.get_sample_value(
        "vigil_requests_total", {"deployment": SMOLLM2, "outcome": "abort", "version": KEY}
    )
    return value or 0.0


async def test_keep_alive_comments_flow_while_a_request_waits(
    tmp_path: Path, smollm2_tokenizer
) -> None:  # type: ignore[no-untyped-def]
    held = ScriptedEngine(num_tokens=2)
    workers = FakeWorkers()
    workers.add("w1", {KEY: held})
    async with (
        running_gateway(tmp_path, workers, smollm2_tokenizer, sse_keepalive_s=0.05) as gw,
        httpx.AsyncClient(base_url=gw.url, timeout=30) as client,
        client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r,
    ):
        lines = aiter(r.aiter_lines())
        seen: list[str] = []
        while seen.count(": keep-alive") < 3:
            seen.append(await anext(lines))
        held.release()
        seen.extend([line async for line in lines])
    assert seen[-2:] == ["data: [DONE]", ""] or "data: [DONE]" in seen
    assert sum('"content":"ok "' in line for line in seen) == 2


async def test_each_request_counts_toward_its_deployments_slo(gateway: Gateway) -> None:
    plane = gateway.services.plane
    await plane.users.create("slo-reader", "a long enough password", actor="test")
    auth = ("slo-reader", "a long enough password")
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
        before = (await client.get(f"/api/admin/slo/{SMOLLM2}", auth=auth)).json()
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        after = (await client.get(f"/api/admin/slo/{SMOLLM2}", auth=auth)).json()
        metrics = (await client.get("/metrics")).text
        missing = await client.get("/api/admin/slo/nope", auth=auth)
    for sli in ("ttft", "tokens_per_s", "availability"):
        assert after["slis"][sli]["total"] == before["slis"][sli]["total"] + 1, sli
    assert after["versions"][KEY]["availability"]["good"] >= 1
    assert after["slis"]["ttft"]["objective"] == 0.99 and after["slis"]["ttft"]["alert"] is None
    budget = f'vigil_slo_error_budget_remaining_ratio{{deployment="{SMOLLM2}",sli="ttft"}}'
    assert budget in metrics
    assert missing.status_code == 404
