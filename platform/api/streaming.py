"""A started generation as OpenAI's Server-Sent Events chunks (whole answers:
answers.py), each choice's with its index, its tool calls as OpenAI's deltas and its
logprobs with the tokens they score.

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

from litestar import Request

from vigil.platform.api.answers import finish_reason, usage
from vigil.platform.api.logprobs import LegacyWriter, chat_logprobs, joined
from vigil.platform.api.openai_responses import (
    SSE_DONE,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatDelta,
    ChoiceLogprobs,
    CompletionChoice,
    CompletionChunk,
    FunctionDelta,
    LegacyLogprobs,
    ToolCallDelta,
    sse,
)
from vigil.platform.gateway.generation import (
    Collected,
    EngineEvent,
    FinishEvent,
    Generation,
    SampledLogprobs,
    TokenEvent,
    finish_error,
)
from vigil.platform.gateway.tool_calls import (
    ArgumentsDelta,
    CallStart,
    Delta,
    TextDelta,
    ToolCallParser,
)
from vigil.platform.wire.errors import body_of

SSE_KEEPALIVE = b": keep-alive\n\n"

T = TypeVar("T")
Write = Callable[[EngineEvent], list[bytes]]


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


async def collect_while_connected(
    generation: Generation, request: Request[Any, Any, Any]
) -> Collected | None:
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


class _ChatChoiceStream:
    """One choice of a streamed chat answer: its tool calls parsed as they come."""

    def __init__(self, parser: ToolCallParser | None) -> None:
        self.parser = parser
        self.called = False

    def delta(self, event: EngineEvent) -> ChatDelta | None:
        if self.parser is None:
            return ChatDelta(content=event.text) if event.text else None
        deltas = self.parser.feed(event.text)
        if isinstance(event, FinishEvent):
            deltas += self.parser.finish()
        text = "".join(d.text for d in deltas if isinstance(d, TextDelta))
        calls = _call_deltas(deltas)
        self.called = self.called or bool(calls)
        if not text and not calls:
            return None
        return ChatDelta(content=text or None, tool_calls=calls or None)


def _call_deltas(deltas: list[Delta]) -> list[ToolCallDelta]:
    """OpenAI's tool-call deltas: a call's start with its id, type and name, then its
    arguments' fragments, consecutive fragments of one call joined."""
    out: list[ToolCallDelta] = []
    for d in deltas:
        if isinstance(d, CallStart):
            out.append(ToolCallDelta(d.index, d.id, "function", FunctionDelta(d.name, "")))
        elif isinstance(d, ArgumentsDelta):
            last = out[-1] if out else None
            if last is not None and last.index == d.index and last.function is not None:
                last.function.arguments = (last.function.arguments or "") + d.text
            else:
                out.append(ToolCallDelta(d.index, function=FunctionDelta(arguments=d.text)))
    return out


async def chat_chunks(
    generation: Generation, include_usage: bool, keepalive_s: float
) -> AsyncIterator[bytes]:
    request_id, created, model = generation.request_id, int(time.time()), generation.deployment
    n = generation.num_choices
    wants_logprobs = generation.request.params.logprobs is not None
    choices = [_ChatChoiceStream(generation.tool_parser()) for _ in range(n)]

    def chunk(*parts: ChatChunkChoice) -> bytes:
        return sse(ChatCompletionChunk(request_id, created, model, list(parts)))

    def write(event: EngineEvent) -> list[bytes]:
        i, choice = event.index, choices[event.index]
        delta = choice.delta(event)
        logprobs: ChoiceLogprobs | None = None
        if wants_logprobs and isinstance(event, TokenEvent):
            logprobs = chat_logprobs(event.logprobs, generation.token_bytes)
        out = []
        if delta is not None or logprobs is not None:
            out.append(chunk(ChatChunkChoice(i, delta or ChatDelta(), None, logprobs)))
        if isinstance(event, FinishEvent):
            # The closing chunk carries an empty delta, not empty content.
            out.append(
                chunk(ChatChunkChoice(i, ChatDelta(), finish_reason(event.reason, choice.called)))
            )
        return out

    def usage_chunk(num_prompt: int, num_output: int) -> bytes:
        return sse(
            ChatCompletionChunk(request_id, created, model, [], usage(num_prompt, num_output))
        )

    yield chunk(*(ChatChunkChoice(i, ChatDelta("assistant", ""), None) for i in range(n)))
    async for piece in _event_chunks(
        generation, write, usage_chunk if include_usage else None, keepalive_s
    ):
        yield piece


async def completion_chunks(
    generation: Generation, include_usage: bool, keepalive_s: float, echo: str | None
) -> AsyncIterator[bytes]:
    """`echo`: the prompt's text, sent first in each choice, when the request asked."""
    request_id, created, model = generation.request_id, int(time.time()), generation.deployment
    n = generation.num_choices
    wants_logprobs = generation.request.params.logprobs is not None
    writers = [LegacyWriter(generation.token_bytes) for _ in range(n)]
    started = [False] * n
    # Choice 0's first event brings them, before any other choice's first event.
    prompt_records: list[SampledLogprobs] = []

    def write(event: EngineEvent) -> list[bytes]:
        i, writer = event.index, writers[event.index]
        records = event.logprobs if isinstance(event, TokenEvent) else ()
        if isinstance(event, TokenEvent):
            prompt_records.extend(event.prompt_logprobs)
        text, head = event.text, None
        if echo is not None and not started[i]:
            text = echo + text
            if wants_logprobs:
                head = writer.echoed_prompt(generation.request.prompt_ids, prompt_records)
        logprobs: LegacyLogprobs | None = None
        if wants_logprobs:
            body = writer.tokens(records)
            logprobs = body if head is None else joined(head, body)
        started[i] = True
        out = []
        if text or (logprobs is not None and logprobs.tokens):
            out.append(chunk(CompletionChoice(i, text, None, logprobs)))
        if isinstance(event, FinishEvent):
            out.append(chunk(CompletionChoice(i, "", finish_reason(event.reason, False))))
        return out

    def chunk(choice: CompletionChoice) -> bytes:
        return sse(CompletionChunk(request_id, created, model, [choice]))

    def usage_chunk(num_prompt: int, num_output: int) -> bytes:
        return sse(CompletionChunk(request_id, created, model, [], usage(num_prompt, num_output)))

    async for piece in _event_chunks(
        generation, write, usage_chunk if include_usage else None, keepalive_s
    ):
        yield piece


async def _event_chunks(
    generation: Generation,
    write: Write,
    usage_chunk: Callable[[int, int], bytes] | None,
    keepalive_s: float,
) -> AsyncIterator[bytes]:
    """The stream shared by both endpoints: each event's chunks, keep-alives while
    waiting, usage (with no choices) once every choice has finished if asked for, then
    [DONE]. A request that fails after the stream began gets an error event instead of
    its failed choice's closing chunk."""
    finishes: list[FinishEvent] = []
    async for event in with_keepalive(generation.events(), keepalive_s):
        if event is None:
            yield SSE_KEEPALIVE
            continue
        if isinstance(event, FinishEvent):
            error = finish_error(event)
            if error is not None:
                yield sse(body_of(error))
                continue  # the generation's events end here
            finishes.append(event)
        for piece in write(event):
            yield piece
    if usage_chunk is not None and len(finishes) == generation.num_choices:
        num_output = sum(f.num_output_tokens for f in finishes)
        yield usage_chunk(finishes[0].num_prompt_tokens, num_output)
    yield SSE_DONE


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
