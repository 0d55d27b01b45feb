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
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import msgspec

from vigil.engine.request import EngineEvent, FinishEvent, FinishReason
from vigil.platform.api.errors import body_of
from vigil.platform.api.openai_schemas import (
    SSE_DONE,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatDelta,
    CompletionChoice,
    CompletionChunk,
    FinishReasonName,
    Usage,
    sse,
)
from vigil.platform.errors import EngineFailed, QueueTimeout, VigilError
from vigil.platform.gateway.generation import GenerationService, PreparedGeneration

FINISH_REASONS: dict[FinishReason, FinishReasonName] = {
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
}
SSE_KEEPALIVE = b": keep-alive\n\n"

T = TypeVar("T")


def failure(event: FinishEvent) -> VigilError:
    if event.reason is FinishReason.TIMEOUT:
        end = event.clock.finished_ts or time.monotonic()
        return QueueTimeout(
            f"The request waited {end - event.clock.arrival_ts:.1f} s in the queue without "
            "starting and was dropped; the server is overloaded, retry later.",
            code="queue_timeout",
            retry_after_s=1,
        )
    return EngineFailed(event.error or "the engine stopped the request", code="engine_error")


def usage_of(finish: FinishEvent) -> Usage:
    return Usage(
        finish.num_prompt_tokens,
        finish.num_output_tokens,
        finish.num_prompt_tokens + finish.num_output_tokens,
    )


async def with_keepalive(events: AsyncIterator[T], interval_s: float) -> AsyncIterator[T | None]:
    """The items of `events`, with a None each time interval_s passes before the first.

    Keep-alives cover the wait in the queue; once tokens flow, the items pass straight
    through (a task per item would cost the event loop more than the tokens)."""
    it = aiter(events)
    first: asyncio.Task[T] = asyncio.ensure_future(anext(it))
    try:
        while not (await asyncio.wait({first}, timeout=interval_s))[0]:
            yield None
    except BaseException:
        # The client left while waiting: cancelling the pending step unwinds the engine
        # stream, which aborts the request.
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
            await first
        raise
    try:
        yield first.result()
    except StopAsyncIteration:
        return
    async for item in it:
        yield item


ChunkOf = Callable[[str, "FinishReasonName | None"], "ChatCompletionChunk | CompletionChunk"]


async def _event_chunks(
    generation: GenerationService,
    prepared: PreparedGeneration,
    chunk: ChunkOf,
    include_usage: bool,
    keepalive_s: float,
) -> AsyncIterator[bytes]:
    """The stream shared by both endpoints: a chunk per piece of text, keep-alives while
    waiting, then the closing chunk(s) and [DONE]."""
    async for event in with_keepalive(generation.events(prepared), keepalive_s):
        if event is None:
            yield SSE_KEEPALIVE
            continue
        if event.text:
            yield sse(chunk(event.text, None))
        if isinstance(event, FinishEvent):
            yield _final(event, chunk("", FINISH_REASONS.get(event.reason)), include_usage)
    yield SSE_DONE


async def chat_chunks(
    generation: GenerationService,
    prepared: PreparedGeneration,
    include_usage: bool,
    keepalive_s: float,
) -> AsyncIterator[bytes]:
    request_id, created = prepared.request.request_id, int(time.time())

    def chunk(text: str, finish: FinishReasonName | None) -> ChatCompletionChunk:
        # The closing chunk carries an empty delta, not empty content.
        delta = ChatDelta(content=text) if text or finish is None else ChatDelta()
        return ChatCompletionChunk(
            request_id, created, prepared.deployment, [ChatChunkChoice(0, delta, finish)]
        )

    opening = ChatCompletionChunk(
        request_id,
        created,
        prepared.deployment,
        [ChatChunkChoice(0, ChatDelta("assistant", ""), None)],
    )
    yield sse(opening)
    async for piece in _event_chunks(generation, prepared, chunk, include_usage, keepalive_s):
        yield piece


async def completion_chunks(
    generation: GenerationService,
    prepared: PreparedGeneration,
    include_usage: bool,
    keepalive_s: float,
) -> AsyncIterator[bytes]:
    request_id, created = prepared.request.request_id, int(time.time())

    def chunk(text: str, finish: FinishReasonName | None) -> CompletionChunk:
        return CompletionChunk(
            request_id, created, prepared.deployment, [CompletionChoice(0, text, finish)]
        )

    async for piece in _event_chunks(generation, prepared, chunk, include_usage, keepalive_s):
        yield piece


async def collect(
    generation: GenerationService, prepared: PreparedGeneration
) -> tuple[str, FinishEvent]:
    parts: list[str] = []
    event: EngineEvent
    # Closed on the way out, not whenever it is collected: its clean-up releases the
    # request's place in the load counts that admission and routing read.
    async with contextlib.aclosing(generation.events(prepared)) as events:
        async for event in events:
            parts.append(event.text)
            if isinstance(event, FinishEvent):
                if event.reason not in FINISH_REASONS:
                    raise failure(event)
                return "".join(parts), event
    raise AssertionError("the engine's event stream ended without a FinishEvent")


def _final(
    event: FinishEvent, last_chunk: ChatCompletionChunk | CompletionChunk, include_usage: bool
) -> bytes:
    """The closing chunk(s): finish_reason, then usage (with no choices) if asked for; an
    error event instead when the request failed after the stream began."""
    if event.reason not in FINISH_REASONS:
        error = failure(event)
        return sse(body_of(error))
    if not include_usage:
        return sse(last_chunk)
    usage_chunk = msgspec.structs.replace(last_chunk, choices=[], usage=usage_of(event))
    return sse(last_chunk) + sse(usage_chunk)
