"""The gateway's link to a worker process, against the real worker app (served by
uvicorn in this process) running a tiny random-weight engine: the events and clocks
that cross, an early close aborting on the worker, refusals, a dead worker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest
import torch
from fakes import serving, tiny_engine
from prometheus_client import CollectorRegistry

from vigil.engine.bundled import MINILM
from vigil.engine.embed_batcher import AsyncEmbedder, BatcherConfig
from vigil.engine.loaders.embedder import EmbeddingModel
from vigil.engine.request import (
    FinishEvent,
    FinishReason,
    GenerationRequest,
    Priority,
    RequestClock,
    RequestId,
    SamplingParams,
    TokenEvent,
)
from vigil.platform.control.specs import bundled_version
from vigil.platform.errors import InvalidRequest
from vigil.platform.gateway.link import (
    CONNECT_TIMEOUT_S,
    STREAM_IDLE_S,
    HttpWorkerLink,
    WorkerUnreachable,
)
from vigil.platform.gateway.workers import HEARTBEAT_TIMEOUT_S, Replica
from vigil.platform.settings import EngineSettings
from vigil.platform.worker.keepalive import KEEPALIVE_S
from vigil.platform.worker.runtime import EngineSlot, Slot, SlotState, WorkerRuntime
from vigil.platform.worker.server import build_worker_app

VERSION = bundled_version("smollm2-135m-instruct")
EMBED = bundled_version(MINILM)
TOKEN = "worker-token"


@pytest.fixture(scope="module")
async def worker(tiny_lm) -> AsyncIterator[tuple[Replica, Slot]]:  # type: ignore[no-untyped-def]
    runtime = WorkerRuntime(EngineSettings(device="cpu"))
    engine = tiny_engine(tiny_lm, num_blocks=16)  # 256 tokens of KV cache
    engine.start()
    slot = Slot(EngineSlot(VERSION.key, VERSION), SlotState.READY, 1.0, engine=engine)
    runtime.slots[VERSION.key] = slot
    try:
        async with serving(build_worker_app(runtime, TOKEN, CollectorRegistry())) as url:
            yield Replica("w1", url, "cpu", 0, 0, 0.0), slot
    finally:
        engine.stop()


@pytest.fixture
async def link() -> AsyncIterator[tuple[HttpWorkerLink, list[str]]]:
    failed: list[str] = []
    async with httpx.AsyncClient() as client:
        yield HttpWorkerLink(client, TOKEN, failed.append), failed


def request(n_prompt: int = 5, max_tokens: int = 4) -> GenerationRequest:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    return GenerationRequest(
        RequestId(f"r-{n_prompt}-{max_tokens}"),
        list(range(1, n_prompt + 1)),
        params,
        Priority.INTERACTIVE,
        RequestClock(time.monotonic()),
    )


async def test_tokens_then_one_finish_with_the_workers_queue_time(worker, link) -> None:  # type: ignore[no-untyped-def]
    replica, _ = worker
    http, failed = link
    req = request()
    events = [e async for e in await http.open(replica, VERSION.key, req)]
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert len(tokens) == 4 and all(len(t.token_ids) == 1 for t in tokens)
    finish = events[-1]
    assert isinstance(finish, FinishEvent) and finish.reason is FinishReason.LENGTH
    assert (finish.num_prompt_tokens, finish.num_output_tokens) == (5, 4)
    assert finish.clock is req.clock and req.clock.scheduled_ts is not None
    # The engine's split of its steps' time crosses too (alone: all of it its own).
    steps = finish.step_times
    assert steps is not None and steps.prefill_own_s > 0 and steps.decode_own_s > 0
    assert steps.prefill_shared_s == pytest.approx(0, abs=1e-9)
    assert not failed


async def test_closing_the_stream_early_aborts_the_request_on_the_worker(worker, link) -> None:  # type: ignore[no-untyped-def]
    replica, slot = worker
    http, _ = link
    events = await http.open(replica, VERSION.key, request(max_tokens=200))
    assert isinstance(await anext(events), TokenEvent)
    await events.aclose()
    for _ in range(200):
        if slot.in_flight == 0 and slot.engine.stats().num_running == 0:
            break
        await asyncio.sleep(0.01)
    assert slot.in_flight == 0 and slot.engine.stats().num_running == 0


async def test_a_request_over_the_engines_context_ends_with_its_refusal(worker, link) -> None:  # type: ignore[no-untyped-def]
    """The gateway fits a request to the context once; the worker trusts it, and a
    request that still does not fit (an engine restarted smaller) ends with the engine's
    own refusal as an error event, the worker still counted up."""
    replica, slot = worker
    http, failed = link
    events = [e async for e in await http.open(replica, VERSION.key, request(250, 10))]
    finish = events[-1]
    assert isinstance(finish, FinishEvent) and finish.reason is FinishReason.ERROR
    assert finish.error is not None and "context window 256 tokens" in finish.error
    assert not failed and slot.in_flight == 0  # a refusal is not a failed worker


@pytest.mark.slow
async def test_an_embedding_crosses_as_token_ids_and_the_worker_embeds_them_untokenized(
    minilm: EmbeddingModel,
    link,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The gateway tokenizes; the worker embeds the ids it gets (its model's tokenizer
    taken away here) and refuses, naming the input, ids its model cannot embed."""
    http, failed = link
    texts = ["A man is eating food.", "A man is eating a piece of bread."]
    rows = minilm.tokenize(texts)
    expected = minilm.embed_token_ids(rows)
    monkeypatch.setattr(minilm, "tokenizer", None)  # any use of it fails
    embedder = AsyncEmbedder(minilm, BatcherConfig(max_wait_ms=0.0))
    embedder.start()
    runtime = WorkerRuntime(EngineSettings(device="cpu"))
    slot = Slot(EngineSlot(EMBED.key, EMBED), SlotState.READY, 1.0, embedder=embedder)
    runtime.slots[EMBED.key] = slot
    try:
        async with serving(build_worker_app(runtime, TOKEN, CollectorRegistry())) as url:
            replica = Replica("w1", url, "cpu", 0, 0, 0.0)
            result = await http.embed(replica, EMBED.key, rows)
            too_long = [rows[0], [101] * (minilm.max_seq_len + 1)]
            with pytest.raises(InvalidRequest, match="limit of 256") as refused:
                await http.embed(replica, EMBED.key, too_long)
    finally:
        embedder.stop()
    assert (torch.tensor(result.vectors) - expected).abs().max().item() < 1e-5
    assert refused.value.param == "input[1]" and refused.value.code == "context_length_exceeded"
    assert not failed and slot.in_flight == 0


async def test_an_unreachable_worker_is_reported_before_the_request_starts(
    link,  # type: ignore[no-untyped-def]
) -> None:
    http, failed = link
    dead = Replica("gone", "http://127.0.0.1:9", "cpu", 0, 0, 0.0)
    with pytest.raises(WorkerUnreachable, match="worker gone"):
        await http.open(dead, VERSION.key, request())
    assert failed == ["gone"]


async def test_a_worker_that_dies_mid_answer_ends_it_with_an_error(link) -> None:  # type: ignore[no-untyped-def]
    http, failed = link

    async def cut_short(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        """A worker that takes the request, sends one event and stops."""
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        line = b'{"type":"token","text":"a","ids":[5]}\n'
        await send({"type": "http.response.body", "body": line, "more_body": False})

    async with serving(cut_short) as url:
        replica = Replica("w9", url, "cpu", 0, 0, 0.0)
        events = [e async for e in await http.open(replica, VERSION.key, request())]
    assert isinstance(events[0], TokenEvent) and events[0].text == "a"
    assert isinstance(events[1], FinishEvent) and events[1].reason is FinishReason.ERROR
    assert "stopped in the middle of the answer" in (events[1].error or "")
    assert failed == ["w9"]


async def test_a_worker_gone_silent_mid_answer_fails_the_stream_within_the_idle_bound(
    link,  # type: ignore[no-untyped-def]
) -> None:
    """A cut link sends no reset: the stream ends on silence, not never."""
    _, failed = link

    async def silent(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        """A worker that sends one event, then nothing (until the gateway hangs up)."""
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        line = b'{"type":"token","text":"a","ids":[5]}\n'
        await send({"type": "http.response.body", "body": line, "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass

    async with httpx.AsyncClient() as client, serving(silent) as url:
        http = HttpWorkerLink(client, TOKEN, failed.append, stream_idle_s=0.3)
        events = await http.open(Replica("w9", url, "cpu", 0, 0, 0.0), VERSION.key, request())
        assert isinstance(await anext(events), TokenEvent)
        t0 = time.monotonic()
        async with asyncio.timeout(5):  # without the bound: forever
            finish = await anext(events)
        waited_s = time.monotonic() - t0
    assert isinstance(finish, FinishEvent) and finish.reason is FinishReason.ERROR
    assert "ReadTimeout" in (finish.error or "")
    # Not before the bound (a busy machine only makes it later); the ReadTimeout says the
    # bound, not the 5 s above, ended it.
    assert waited_s >= 0.25, waited_s
    assert failed == ["w9"]


async def test_keepalives_hold_a_waiting_request_past_the_idle_bound(link) -> None:  # type: ignore[no-untyped-def]
    _, failed = link

    async def queued(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        """A worker whose request waits 1 s (a blank line every 0.1 s), then answers."""
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(10):
            await send({"type": "http.response.body", "body": b"\n", "more_body": True})
            await asyncio.sleep(0.1)
        lines = (
            b'{"type":"token","text":"a","ids":[5]}\n'
            b'{"type":"finish","reason":"length","text":"","num_prompt_tokens":5,'
            b'"num_output_tokens":1,"queue_s":null}\n'
        )
        await send({"type": "http.response.body", "body": lines, "more_body": False})

    async with httpx.AsyncClient() as client, serving(queued) as url:
        http = HttpWorkerLink(client, TOKEN, failed.append, stream_idle_s=0.3)
        replica = Replica("w8", url, "cpu", 0, 0, 0.0)
        events = [e async for e in await http.open(replica, VERSION.key, request())]
    assert isinstance(events[-1], FinishEvent) and events[-1].reason is FinishReason.LENGTH
    assert not failed


def test_a_lost_worker_is_given_up_within_3_s_and_late_keepalives_are_tolerated() -> None:
    """A worker that drops off is given up within 3 s, on its heartbeats and on its
    streams and connects; its keep-alives come often enough that one or two late ones
    do not cut a stream."""
    assert HEARTBEAT_TIMEOUT_S < 3.0 and STREAM_IDLE_S <= 3.0
    assert CONNECT_TIMEOUT_S <= HEARTBEAT_TIMEOUT_S
    assert STREAM_IDLE_S >= 2 * KEEPALIVE_S
