"""The gateway's link to a worker process, against the real worker app (served by
uvicorn in this process) running a tiny random-weight engine: the events and clocks
that cross, an early close aborting on the worker, refusals, a dead worker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from fakes import serving, tiny_engine
from prometheus_client import CollectorRegistry

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
from vigil.platform.gateway.link import HttpWorkerLink, WorkerUnreachable
from vigil.platform.gateway.workers import Replica
from vigil.platform.settings import EngineSettings
from vigil.platform.worker.runtime import EngineSlot, Slot, SlotState, WorkerRuntime
from vigil.platform.worker.server import build_worker_app

VERSION = bundled_version("smollm2-135m-instruct")
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


async def test_a_request_over_the_workers_context_is_refused_with_the_field(worker, link) -> None:  # type: ignore[no-untyped-def]
    replica, _ = worker
    http, failed = link
    with pytest.raises(InvalidRequest) as caught:
        await http.open(replica, VERSION.key, request(n_prompt=250, max_tokens=10))
    assert caught.value.code == "context_length_exceeded" and caught.value.param == "max_tokens"
    assert not failed  # a refusal is not a failed worker


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
