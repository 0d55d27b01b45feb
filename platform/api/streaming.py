"""Engine events -> OpenAI's Server-Sent Events chunks, and the errors a finish can carry.

A stream's headers go out at once; while a request still waits in the queue, an SSE
comment every `keepalive_s` keeps proxies and clients from closing the connection. A
request that fails after the stream began ends with an error event and [DONE], never
a cut connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import TypeVar

from vigil.engine.request import EngineEvent, FinishEvent, FinishReason
from vigil.platform.api.openai_schemas import SSE_DONE, Usage, sse
from vigil.platform.errors import APIError, error_body
from vigil.platform.gateway.generation import GenerationService, PreparedGeneration

FINISH_REASONS = {FinishReason.STOP: "stop", FinishReason.LENGTH: "length"}
SSE_KEEPALIVE = b": keep-alive\n\n"

T = TypeVar("T")


class EngineFailed(APIError):
    status_code = 500
    error_type = "server_error"


class QueueTimeout(APIError):
    """The request waited in the queue past its deadline and never started: 503 with
    Retry-After, since the server is overloaded now and the same request may succeed
    later."""

    status_code = 503
    error_type = "service_unavailable_error"


def failure(event: FinishEvent) -> APIError:
    if event.reason is FinishReason.TIMEOUT:
        end = event.clock.finished_ts or time.monotonic()
        return QueueTimeout(
            f"The request waited {end - event.clock.arrival_ts:.1f} s in the queue without "
            "starting and was dropped; the server is overloaded, retry later.",
            code="queue_timeout",
            headers={"Retry-After": "1"},
        )
    return EngineFailed(event.error or "the engine stopped the request", code="engine_error")


def usage_of(finish: FinishEvent) -> Usage:
    return Usage(
        finish.num_prompt_tokens,
        finish.num_output_tokens,
        finish.num_prompt_tokens + finish.num_output_tokens,
    )


async def with_keepalive(events: AsyncIterator[T], interval_s: float) -> AsyncIterator[T | None]:
    """The items of `events`, with a None each time interval_s passes without one."""
    it = aiter(events)
    pending: asyncio.Task[T] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(it))
            done, _ = await asyncio.wait({pending}, timeout=interval_s)
            if not done:
                yield None
                continue
            try:
                item = pending.result()
            except StopAsyncIteration:
                return
            pending = None
            yield item
    finally:
        if pending is not None:
            # The client left while waiting: cancelling the pending step unwinds the
            # engine stream, which aborts the request.
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending


async def chat_chunks(
    generation: GenerationService,
    prepared: PreparedGeneration,
    include_usage: bool,
    keepalive_s: float,
) -> AsyncIterator[bytes]:
    base = _base(prepared, "chat.completion.chunk")

    def chunk(delta: dict[str, str], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse({**base, "choices": [choice]})

    yield chunk({"role": "assistant", "content": ""})
    async for event in with_keepalive(generation.events(prepared), keepalive_s):
        if event is None:
            yield SSE_KEEPALIVE
            continue
        if event.text:
            yield chunk({"content": event.text})
        if isinstance(event, FinishEvent):
            yield _final(event, chunk({}, FINISH_REASONS.get(event.reason)), base, include_usage)
    yield SSE_DONE


async def completion_chunks(
    generation: GenerationService,
    prepared: PreparedGeneration,
    include_usage: bool,
    keepalive_s: float,
) -> AsyncIterator[bytes]:
    base = _base(prepared, "text_completion")

    def chunk(text: str, finish: str | None = None) -> bytes:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        return sse({**base, "choices": [choice]})

    async for event in with_keepalive(generation.events(prepared), keepalive_s):
        if event is None:
            yield SSE_KEEPALIVE
            continue
        if event.text:
            yield chunk(event.text)
        if isinstance(event, FinishEvent):
            yield _final(event, chunk("", FINISH_REASONS.get(event.reason)), base, include_usage)
    yield SSE_DONE


async def collect(
    generation: GenerationService, prepared: PreparedGeneration
) -> tuple[str, FinishEvent]:
    parts: list[str] = []
    event: EngineEvent
    async for event in generation.events(prepared):
        parts.append(event.text)
        if isinstance(event, FinishEvent):
            if event.reason not in FINISH_REASONS:
                raise failure(event)
            return "".join(parts), event
    raise AssertionError("the engine's event stream ended without a FinishEvent")


def _base(prepared: PreparedGeneration, kind: str) -> dict[str, object]:
    return {
        "id": prepared.request.request_id,
        "object": kind,
        "created": int(time.time()),
        "model": prepared.deployment,
    }


def _final(
    event: FinishEvent, last_chunk: bytes, base: dict[str, object], include_usage: bool
) -> bytes:
    """The closing chunk(s): finish_reason, then usage if asked for; an error event
    instead when the request failed after the stream began."""
    if event.reason not in FINISH_REASONS:
        error = failure(event)
        return sse(error_body(error.message, error.error_type, None, error.code))
    if not include_usage:
        return last_chunk
    usage = usage_of(event)
    return last_chunk + sse(
        {
            **base,
            "choices": [],
            "usage": {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
            },
        }
    )
