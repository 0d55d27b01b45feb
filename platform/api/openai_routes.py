"""`/v1/*`: the OpenAI-compatible endpoints. Thin: validate -> service -> response."""

from __future__ import annotations

import base64
import time

import msgspec
import numpy as np
from litestar import Controller, Response, get, post
from litestar.response import Stream

from vigil.platform.api.openai_schemas import (
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatMessageOut,
    Completion,
    CompletionChoice,
    CompletionChunk,
    CompletionRequest,
    Embedding,
    EmbeddingList,
    EmbeddingRequest,
    ModelCard,
    ModelList,
)
from vigil.platform.api.openapi_docs import OperationDocs, documented
from vigil.platform.api.streaming import (
    FINISH_REASONS,
    chat_chunks,
    collect,
    completion_chunks,
    usage_of,
)
from vigil.platform.errors import ModelNotFound
from vigil.platform.gateway.auth import Principal
from vigil.platform.gateway.embeddings import EmbeddingService
from vigil.platform.gateway.generation import GenerationService, PreparedGeneration
from vigil.platform.settings import ServeSettings

INFERENCE_ERRORS = (400, 401, 403, 404, 413, 429, 500, 503)
CHAT_DOCS = OperationDocs(
    ok=ChatCompletion,
    ok_description="The completion; with `stream: true`, Server-Sent Events of chunks "
    "ending with `data: [DONE]`.",
    request=ChatCompletionRequest,
    stream_chunk=ChatCompletionChunk,
    errors=INFERENCE_ERRORS,
    served_by=True,
    may_fall_back=True,
)
COMPLETION_DOCS = OperationDocs(
    ok=Completion,
    ok_description=CHAT_DOCS.ok_description,
    request=CompletionRequest,
    stream_chunk=CompletionChunk,
    errors=INFERENCE_ERRORS,
    served_by=True,
    may_fall_back=True,
)
EMBEDDING_DOCS = OperationDocs(
    ok=EmbeddingList,
    ok_description="One vector per input, in input order.",
    request=EmbeddingRequest,
    errors=INFERENCE_ERRORS,
    served_by=True,
)
MODELS_DOCS = OperationDocs(ok=ModelList, ok_description="The models this API key may use.")
MODEL_DOCS = OperationDocs(
    ok=ModelCard, ok_description="The model.", errors=(400, 401, 404, 429, 500)
)


class OpenAIController(Controller):
    path = "/v1"
    tags = ("OpenAI-compatible",)

    @post(
        "/chat/completions",
        summary="Create a chat completion",
        status_code=200,
        operation_class=documented(CHAT_DOCS),
    )
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

    @post(
        "/completions",
        summary="Create a text completion",
        status_code=200,
        operation_class=documented(COMPLETION_DOCS),
    )
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

    @post(
        "/embeddings",
        summary="Create embeddings",
        status_code=200,
        operation_class=documented(EMBEDDING_DOCS),
    )
    async def embeddings(
        self, data: EmbeddingRequest, embedding: EmbeddingService, principal: Principal
    ) -> Response[EmbeddingList]:
        body, request_id, served_by = await embedding.embed(data, principal, time.monotonic())
        if data.encoding_format == "base64":
            body = msgspec.structs.replace(body, data=[_base64(e) for e in body.data])
        return Response(body, headers={"x-request-id": request_id, "x-vigil-served-by": served_by})

    @get(
        "/models",
        summary="List the models this server serves",
        operation_class=documented(MODELS_DOCS),
    )
    async def models(self, generation: GenerationService, principal: Principal) -> ModelList:
        started = int(generation.models.created_ts)
        names = [n for n in generation.models.names() if principal.may_use(n)]
        return ModelList([ModelCard(name, started, "vigil") for name in names])

    @get(
        "/models/{model_id:str}",
        summary="Describe one model",
        operation_class=documented(MODEL_DOCS),
    )
    async def model(
        self, model_id: str, generation: GenerationService, principal: Principal
    ) -> ModelCard:
        # A model the key may not use is as absent here as it is from /v1/models.
        names = [n for n in generation.models.names() if principal.may_use(n)]
        if model_id not in names:
            raise ModelNotFound(model_id, names)
        return ModelCard(model_id, int(generation.models.created_ts), "vigil")


def _headers(prepared: PreparedGeneration) -> dict[str, str]:
    headers = {
        "x-request-id": prepared.request.request_id,
        "x-vigil-served-by": prepared.served_by,
        "x-vigil-replica": prepared.engine.replica,  # the worker that runs it
    }
    if prepared.fallback_from is not None:
        headers["x-vigil-fallback-from"] = prepared.fallback_from
    if prepared.request.request_id.startswith(("chatcmpl", "cmpl")):
        headers["Cache-Control"] = "no-cache"
    return headers


def _base64(embedding: Embedding) -> Embedding:
    """OpenAI's base64 encoding: the vector's float32s, little-endian, base64-encoded."""
    raw = np.asarray(embedding.embedding, dtype="<f4").tobytes()
    return msgspec.structs.replace(embedding, embedding=base64.b64encode(raw).decode("ascii"))
