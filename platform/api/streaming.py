"""A started generation as OpenAI's responses: one body, or Server-Sent Events chunks.

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
from typing import Any, TypeVar

import msgspec
from litestar import Request

from vigil.platform.api.openai_schemas import (
    SSE_DONE,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatDelta,
    ChatMessageOut,
    Completion,
    CompletionChoice,
    CompletionChunk,
    FinishReasonName,
    Usage,
    sse,
)
from vigil.platform.gateway.generation import FinishEvent, FinishReason, Generation, finish_error
from vigil.platform.wire.errors import body_of

FINISH_REASONS: dict[FinishReason, FinishReasonName] = {
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
}
SSE_KEEPALIVE = b": keep-alive\n\n"

T = TypeVar("T")
ChunkOf = Callable[[str, "FinishReasonName | None"], "ChatCompletionChunk | CompletionChunk"]


def response_headers(generation: Generation) -> dict[str, str]:
    headers = {
        "x-request-id": generation.request_id,
        "x-vigil-served-by": generation.served_by,
        "x-vigil-replica": generation.replica,  # the worker that runs it
        "Cache-Control": "no-cache",
    }
    route = generation.route
    if route.fallback_from is not None:
        headers["x-vigil-fallback-from"] = route.fallback_from
    if route.skipped is not None:
        headers["x-vigil-fallback-skipped"] = route.skipped
    return headers


def usage_of(finish: FinishEvent) -> Usage:
    return Usage(
        finish.num_prompt_tokens,
        finish.num_output_tokens,
        finish.num_prompt_tokens + finish.num_output_tokens,
    )


def chat_completion(generation: Generation, text: str, finish: FinishEvent) -> ChatCompletion:
    choice = ChatChoice(0, ChatMessageOut("assistant", text), FINISH_REASONS[finish.reason])
    return ChatCompletion(
        generation.request_id, int(time.time()), generation.deployment, [choice], usage_of(finish)
    )


def completion(generation: Generation, text: str, finish: FinishEvent) -> Completion:
    choice = CompletionChoice(0, text, FINISH_REASONS[finish.reason])
    return Completion(
        generation.request_id, int(time.time()), generation.deployment, [choice], usage_of(finish)
    )


async def collect_while_connected(
    generation: Generation, request: Request[Any, Any, Any]
) -> tuple[str, FinishEvent] | None:
    """The whole answer, or None once the client has gone: then the request is aborted in
    the engine instead of generating to its end for nobody."""
    collecting = asyncio.ensure_future(generation.collect())
    watching = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({collecting, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watching.cancel()
        if not collecting.done():
            collecting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
    if not collecting.done() or collecting.cancelled():
        with contextlib.suppress(asyncio.CancelledError):
            await collecting
        return None
    return collecting.result()


async def _disconnected(request: Request[Any, Any, Any]) -> None:
    """Returns when the client closes the connection (the body has been read by then)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def chat_chunks(
    generation: Generation, include_usage: bool, keepalive_s: float
) -> AsyncIterator[bytes]:
    request_id, created, model = generation.request_id, int(time.time()), generation.deployment

    def chunk(text: str, finish: FinishReasonName | None) -> ChatCompletionChunk:
        # The closing chunk carries an empty delta, not empty content.
        delta = ChatDelta(content=text) if text or finish is None else ChatDelta()
        return ChatCompletionChunk(request_id, created, model, [ChatChunkChoice(0, delta, finish)])

    opening = ChatChunkChoice(0, ChatDelta("assistant", ""), None)
    yield sse(ChatCompletionChunk(request_id, created, model, [opening]))
    async for piece in _event_chunks(generation, chunk, include_usage, keepalive_s):
        yield piece


async def completion_chunks(
    generation: Generation, include_usage: bool, keepalive_s: float
) -> AsyncIterator[bytes]:
    request_id, created, model = generation.request_id, int(time.time()), generation.deployment

    def chunk(text: str, finish: FinishReasonName | None) -> CompletionChunk:
        return CompletionChunk(request_id, created, model, [CompletionChoice(0, text, finish)])

    async for piece in _event_chunks(generation, chunk, include_usage, keepalive_s):
        yield piece


async def _event_chunks(
    generation: Generation, chunk: ChunkOf, include_usage: bool, keepalive_s: float
) -> AsyncIterator[bytes]:
    """The stream shared by both endpoints: a chunk per piece of text, keep-alives while
    waiting, then the closing chunk(s) and [DONE]."""
    async for event in with_keepalive(generation.events(), keepalive_s):
        if event is None:
            yield SSE_KEEPALIVE
            continue
        if event.text:
            yield sse(chunk(event.text, None))
        if isinstance(event, FinishEvent):
            yield _final(event, chunk("", FINISH_REASONS.get(event.reason)), include_usage)
    yield SSE_DONE


def _final(
    event: FinishEvent, last_chunk: ChatCompletionChunk | CompletionChunk, include_usage: bool
) -> bytes:
    """The closing chunk(s): finish_reason, then usage (with no choices) if asked for; an
    error event instead when the request failed after the stream began."""
    error = finish_error(event)
    if error is not None:
        return sse(body_of(error))
    if not include_usage:
        return sse(last_chunk)
    usage_chunk = msgspec.structs.replace(last_chunk, choices=[], usage=usage_of(event))
    return sse(last_chunk) + sse(usage_chunk)


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
