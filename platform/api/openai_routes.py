"""`/v1/*`: the OpenAI-compatible endpoints. Thin: validate -> service -> response."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from litestar import Controller, Response, get, post
from litestar.response import Stream

from vigil.engine.request import FinishEvent, FinishReason, TokenEvent
from vigil.platform.api.openai_schemas import (
    SSE_DONE,
    ChatChoice,
    ChatCompletion,
    ChatCompletionRequest,
    ChatMessageOut,
    Completion,
    CompletionChoice,
    CompletionRequest,
    EmbeddingList,
    EmbeddingRequest,
    ModelCard,
    ModelList,
    Usage,
    sse,
)
from vigil.platform.errors import APIError, error_body
from vigil.platform.gateway.embeddings import EmbeddingService
from vigil.platform.gateway.generation import GenerationService, PreparedGeneration

_FINISH = {FinishReason.STOP: "stop", FinishReason.LENGTH: "length"}
_STARTED = int(time.time())


class EngineFailed(APIError):
    status_code = 500
    error_type = "server_error"


class QueueTimeout(APIError):
    """The request waited in the queue past its deadline and never started. 503 with
    Retry-After: the server is overloaded now, the same request may succeed later."""

    status_code = 503
    error_type = "service_unavailable_error"


def _failure(event: FinishEvent) -> APIError:
    if event.reason is FinishReason.TIMEOUT:
        waited = event.clock.finished_ts - event.clock.arrival_ts if event.clock.finished_ts else 0
        return QueueTimeout(
            f"The request waited {waited:.1f} s in the queue without starting and was dropped; "
            "the server is overloaded, retry later.",
            code="queue_timeout",
            headers={"Retry-After": "1"},
        )
    return EngineFailed(event.error or "the engine stopped the request", code="engine_error")


class OpenAIController(Controller):
    path = "/v1"
    tags = ("OpenAI-compatible",)

    @post("/chat/completions", summary="Create a chat completion", status_code=200)
    async def chat_completions(
        self, data: ChatCompletionRequest, generation: GenerationService
    ) -> Response[ChatCompletion] | Stream:
        prepared = generation.prepare_chat(data, time.monotonic())
        include_usage = bool(data.stream_options and data.stream_options.include_usage)
        if data.stream:
            return _stream(_chat_chunks(generation, prepared, include_usage), prepared)
        text, finish = await _collect(generation, prepared)
        body = ChatCompletion(
            id=prepared.request.request_id,
            created=int(time.time()),
            model=prepared.deployment,
            choices=[ChatChoice(0, ChatMessageOut("assistant", text), _FINISH[finish.reason])],
            usage=_usage(finish),
        )
        return Response(body, headers=_headers(prepared))

    @post("/completions", summary="Create a text completion", status_code=200)
    async def completions(
        self, data: CompletionRequest, generation: GenerationService
    ) -> Response[Completion] | Stream:
        prepared = generation.prepare_completion(data, time.monotonic())
        include_usage = bool(data.stream_options and data.stream_options.include_usage)
        if data.stream:
            return _stream(_completion_chunks(generation, prepared, include_usage), prepared)
        text, finish = await _collect(generation, prepared)
        body = Completion(
            id=prepared.request.request_id,
            created=int(time.time()),
            model=prepared.deployment,
            choices=[CompletionChoice(0, text, _FINISH[finish.reason])],
            usage=_usage(finish),
        )
        return Response(body, headers=_headers(prepared))

    @post("/embeddings", summary="Create embeddings", status_code=200)
    async def embeddings(
        self, data: EmbeddingRequest, embedding: EmbeddingService
    ) -> Response[EmbeddingList]:
        body, request_id = await embedding.embed(data, time.monotonic())
        return Response(body, headers={"x-request-id": request_id})

    @get("/models", summary="List the models this server serves")
    async def models(self, generation: GenerationService) -> ModelList:
        names = generation.models.names()
        return ModelList([ModelCard(name, _STARTED, "vigil") for name in names])


def _headers(prepared: PreparedGeneration) -> dict[str, str]:
    return {"x-request-id": prepared.request.request_id}


def _usage(finish: FinishEvent) -> Usage:
    return Usage(
        finish.num_prompt_tokens,
        finish.num_output_tokens,
        finish.num_prompt_tokens + finish.num_output_tokens,
    )


async def _collect(
    generation: GenerationService, prepared: PreparedGeneration
) -> tuple[str, FinishEvent]:
    parts: list[str] = []
    async for event in generation.events(prepared):
        parts.append(event.text)
        if isinstance(event, FinishEvent):
            if event.reason not in _FINISH:
                raise _failure(event)
            return "".join(parts), event
    raise AssertionError("the engine's event stream ended without a FinishEvent")


def _stream(chunks: AsyncIterator[bytes], prepared: PreparedGeneration) -> Stream:
    headers = {**_headers(prepared), "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return Stream(chunks, media_type="text/event-stream", headers=headers)


async def _chat_chunks(
    generation: GenerationService, prepared: PreparedGeneration, include_usage: bool
) -> AsyncIterator[bytes]:
    base = {
        "id": prepared.request.request_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": prepared.deployment,
    }

    def chunk(delta: dict[str, str], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse({**base, "choices": [choice]})

    yield chunk({"role": "assistant", "content": ""})
    async for event in generation.events(prepared):
        if event.text:
            yield chunk({"content": event.text})
        if isinstance(event, FinishEvent):
            yield _final(event, chunk({}, _FINISH.get(event.reason)), base, include_usage)
    yield SSE_DONE


async def _completion_chunks(
    generation: GenerationService, prepared: PreparedGeneration, include_usage: bool
) -> AsyncIterator[bytes]:
    base = {
        "id": prepared.request.request_id,
        "object": "text_completion",
        "created": int(time.time()),
        "model": prepared.deployment,
    }

    def chunk(text: str, finish: str | None = None) -> bytes:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        return sse({**base, "choices": [choice]})

    async for event in generation.events(prepared):
        if isinstance(event, TokenEvent):
            if event.text:
                yield chunk(event.text)
            continue
        if event.text:
            yield chunk(event.text)
        yield _final(event, chunk("", _FINISH.get(event.reason)), base, include_usage)
    yield SSE_DONE


def _final(
    event: FinishEvent, last_chunk: bytes, base: dict[str, object], include_usage: bool
) -> bytes:
    """The closing chunk(s): finish_reason, then usage if asked for; an error
    event instead when the engine failed the request mid-stream."""
    if event.reason not in _FINISH:
        error = _failure(event)
        return sse(error_body(error.message, error.error_type, None, error.code))
    out = last_chunk
    if include_usage:
        usage = _usage(event)
        out += sse(
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
    return out
