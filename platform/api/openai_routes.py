"""`/v1/*`: the OpenAI-compatible endpoints. Thin: validate -> service -> response."""

from __future__ import annotations

import base64
import time
from typing import Any

import numpy as np
from litestar import Controller, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath
from litestar.response import Stream

from vigil.platform.api.answers import chat_completion, completion, echo_text
from vigil.platform.api.body import decode_body
from vigil.platform.api.generations import start_generation
from vigil.platform.api.openai_responses import (
    ChatCompletion,
    ChatCompletionChunk,
    Completion,
    CompletionChunk,
    Embedding,
    EmbeddingList,
    EmbeddingUsage,
    ModelCard,
    ModelList,
    ModelPrecision,
    ModelVigil,
)
from vigil.platform.api.openai_schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
)
from vigil.platform.api.openapi_docs import OperationDocs, documented
from vigil.platform.api.streaming import (
    chat_chunks,
    collect_while_connected,
    completion_chunks,
    response_headers,
)
from vigil.platform.errors import ModelNotFound, VigilError
from vigil.platform.gateway.auth import Principal
from vigil.platform.gateway.embeddings import EmbeddingService
from vigil.platform.gateway.pipeline import GenerationService
from vigil.platform.gateway.serving import ServingView
from vigil.platform.settings import ServeSettings
from vigil.platform.wire.errors import CLIENT_CLOSED_REQUEST

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
        request: Request[Any, Any, Any],
        generation: NamedDependency[GenerationService],
        principal: NamedDependency[Principal],
        settings: NamedDependency[ServeSettings],
    ) -> Response[ChatCompletion] | Response[None] | Stream:
        data = decode_body(await request.body(), ChatCompletionRequest)
        params = data.params(settings.max_choices)
        started = await start_generation(generation, params, principal, time.monotonic())
        headers = response_headers(started)
        if data.stream:
            chunks = chat_chunks(started, data.include_usage, settings.sse_keepalive_s)
            return Stream(chunks, media_type="text/event-stream", headers=headers)
        answer = await collect_while_connected(started, request)
        if answer is None:
            return Response(None, status_code=CLIENT_CLOSED_REQUEST)
        return Response(chat_completion(started, answer), headers=headers)

    @post(
        "/completions",
        summary="Create a text completion",
        status_code=200,
        operation_class=documented(COMPLETION_DOCS),
    )
    async def completions(
        self,
        request: Request[Any, Any, Any],
        generation: NamedDependency[GenerationService],
        principal: NamedDependency[Principal],
        settings: NamedDependency[ServeSettings],
    ) -> Response[Completion] | Response[None] | Stream:
        data = decode_body(await request.body(), CompletionRequest)
        params = data.params(settings.max_choices)
        started = await start_generation(generation, params, principal, time.monotonic())
        headers = response_headers(started)
        echo = echo_text(started, data.prompt) if data.echo else None
        if data.stream:
            keepalive_s = settings.sse_keepalive_s
            chunks = completion_chunks(started, data.include_usage, keepalive_s, echo)
            return Stream(chunks, media_type="text/event-stream", headers=headers)
        answer = await collect_while_connected(started, request)
        if answer is None:
            return Response(None, status_code=CLIENT_CLOSED_REQUEST)
        return Response(completion(started, answer, echo), headers=headers)

    @post(
        "/embeddings",
        summary="Create embeddings",
        status_code=200,
        operation_class=documented(EMBEDDING_DOCS),
    )
    async def embeddings(
        self,
        request: Request[Any, Any, Any],
        embedding: NamedDependency[EmbeddingService],
        principal: NamedDependency[Principal],
    ) -> Response[EmbeddingList]:
        data = decode_body(await request.body(), EmbeddingRequest)
        try:
            result = await embedding.embed(data.model, data.texts(), principal, time.monotonic())
        except VigilError as exc:
            if isinstance(data.input, str) and exc.param == "input[0]":
                exc.param = "input"  # the client sent one string, not a list
                exc.message = exc.message.replace("input[0]", "'input'")
            raise
        vectors = [_encoded(v, data.encoding_format) for v in result.vectors]
        body = EmbeddingList(
            data=[Embedding(i, v) for i, v in enumerate(vectors)],
            model=data.model,
            usage=EmbeddingUsage(result.num_tokens, result.num_tokens),
        )
        headers = {
            "x-request-id": result.request_id,
            "x-vigil-served-by": result.served_by,
        }
        return Response(body, headers=headers)

    @get(
        "/models",
        summary="List the models this server serves",
        operation_class=documented(MODELS_DOCS),
    )
    async def models(
        self, view: NamedDependency[ServingView], principal: NamedDependency[Principal]
    ) -> ModelList:
        started = int(view.created_ts)
        names = [n for n in view.names() if principal.may_use(n)]
        return ModelList([_card(view, name, started) for name in names])

    @get(
        "/models/{model_id:str}",
        summary="Describe one model",
        operation_class=documented(MODEL_DOCS),
    )
    async def model(
        self,
        model_id: FromPath[str],
        view: NamedDependency[ServingView],
        principal: NamedDependency[Principal],
    ) -> ModelCard:
        # A model the key may not use is as absent here as it is from /v1/models.
        names = [n for n in view.names() if principal.may_use(n)]
        if model_id not in names:
            raise ModelNotFound(model_id, names)
        return _card(view, model_id, int(view.created_ts))


def _card(view: ServingView, name: str, created: int) -> ModelCard:
    p = view.precision(name)
    precision = None if p is None else ModelPrecision(p.runs_as, p.quantization, p.dtype, p.reason)
    return ModelCard(name, created, "vigil", vigil=ModelVigil(precision))


def _encoded(vector: list[float], encoding_format: str) -> list[float] | str:
    """OpenAI's base64 encoding: the vector's float32s, little-endian, base64-encoded."""
    if encoding_format != "base64":
        return vector
    raw = np.asarray(vector, dtype="<f4").tobytes()
    return base64.b64encode(raw).decode("ascii")
