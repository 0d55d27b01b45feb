"""`/v1/*`: the OpenAI-compatible endpoints. Thin: validate -> service -> response."""

from __future__ import annotations

import time

from litestar import Controller, Response, get, post
from litestar.response import Stream

from vigil.platform.api.openai_schemas import (
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
)
from vigil.platform.api.streaming import (
    FINISH_REASONS,
    chat_chunks,
    collect,
    completion_chunks,
    usage_of,
)
from vigil.platform.gateway.auth import Principal
from vigil.platform.gateway.embeddings import EmbeddingService
from vigil.platform.gateway.generation import GenerationService, PreparedGeneration
from vigil.platform.settings import ServeSettings


class OpenAIController(Controller):
    path = "/v1"
    tags = ("OpenAI-compatible",)

    @post("/chat/completions", summary="Create a chat completion", status_code=200)
    async def chat_completions(
        self,
        data: ChatCompletionRequest,
        generation: GenerationService,
        principal: Principal,
        settings: ServeSettings,
    ) -> Response[ChatCompletion] | Stream:
        prepared = generation.prepare_chat(data, principal, time.monotonic())
        if data.stream:
            usage = bool(data.stream_options and data.stream_options.include_usage)
            chunks = chat_chunks(generation, prepared, usage, settings.sse_keepalive_s)
            return Stream(chunks, media_type="text/event-stream", headers=_headers(prepared))
        text, finish = await collect(generation, prepared)
        message = ChatMessageOut("assistant", text)
        body = ChatCompletion(
            id=prepared.request.request_id,
            created=int(time.time()),
            model=prepared.deployment,
            choices=[ChatChoice(0, message, FINISH_REASONS[finish.reason])],
            usage=usage_of(finish),
        )
        return Response(body, headers=_headers(prepared))

    @post("/completions", summary="Create a text completion", status_code=200)
    async def completions(
        self,
        data: CompletionRequest,
        generation: GenerationService,
        principal: Principal,
        settings: ServeSettings,
    ) -> Response[Completion] | Stream:
        prepared = generation.prepare_completion(data, principal, time.monotonic())
        if data.stream:
            usage = bool(data.stream_options and data.stream_options.include_usage)
            chunks = completion_chunks(generation, prepared, usage, settings.sse_keepalive_s)
            return Stream(chunks, media_type="text/event-stream", headers=_headers(prepared))
        text, finish = await collect(generation, prepared)
        body = Completion(
            id=prepared.request.request_id,
            created=int(time.time()),
            model=prepared.deployment,
            choices=[CompletionChoice(0, text, FINISH_REASONS[finish.reason])],
            usage=usage_of(finish),
        )
        return Response(body, headers=_headers(prepared))

    @post("/embeddings", summary="Create embeddings", status_code=200)
    async def embeddings(
        self, data: EmbeddingRequest, embedding: EmbeddingService, principal: Principal
    ) -> Response[EmbeddingList]:
        body, request_id, served_by = await embedding.embed(data, principal, time.monotonic())
        return Response(body, headers={"x-request-id": request_id, "x-vigil-served-by": served_by})

    @get("/models", summary="List the models this server serves")
    async def models(self, generation: GenerationService, principal: Principal) -> ModelList:
        started = int(generation.models.created_ts)
        names = [n for n in generation.models.names() if principal.may_use(n)]
        return ModelList([ModelCard(name, started, "vigil") for name in names])


def _headers(prepared: PreparedGeneration) -> dict[str, str]:
    headers = {"x-request-id": prepared.request.request_id, "x-vigil-served-by": prepared.served_by}
    if prepared.fallback_from is not None:
        headers["x-vigil-fallback-from"] = prepared.fallback_from
    if prepared.request.request_id.startswith(("chatcmpl", "cmpl")):
        headers["Cache-Control"] = "no-cache"
    return headers
