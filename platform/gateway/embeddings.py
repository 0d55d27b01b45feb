"""From an embeddings request to vectors, computed by a worker: usage and metrics here,
token caps there (the worker holds the model's tokenizer and its limit)."""

from __future__ import annotations

import uuid

from vigil.platform.api.openai_schemas import (
    Embedding,
    EmbeddingList,
    EmbeddingRequest,
    EmbeddingUsage,
)
from vigil.platform.errors import PermissionDenied, VigilError
from vigil.platform.gateway.auth import Principal
from vigil.platform.gateway.models import ModelDirectory
from vigil.platform.telemetry.recorder import RequestRecorder


class EmbeddingService:
    def __init__(self, models: ModelDirectory, recorder: RequestRecorder) -> None:
        self.models = models
        self.recorder = recorder

    async def embed(
        self, body: EmbeddingRequest, principal: Principal, arrival_ts: float
    ) -> tuple[EmbeddingList, str, str]:
        """The vectors, the request id and the model/version that computed them."""
        embedder, version = self.models.embedder(body.model)
        if not principal.may_use(body.model):
            raise PermissionDenied(
                f"This API key may not use the model '{body.model}'.",
                param="model",
                code="model_not_allowed",
            )
        single = isinstance(body.input, str)
        num_tokens, ok = 0, False
        try:
            result = await embedder.embed(body.texts())
            num_tokens, ok = result.num_tokens, True
        except VigilError as exc:
            if single and exc.param == "input[0]":
                exc.param = "input"  # the client sent one string, not a list
                exc.message = exc.message.replace("input[0]", "'input'")
            raise
        finally:
            self.recorder.record_embedding(body.model, num_tokens, arrival_ts, ok)
        data = EmbeddingList(
            data=[Embedding(i, v) for i, v in enumerate(result.vectors)],
            model=body.model,
            usage=EmbeddingUsage(num_tokens, num_tokens),
        )
        return data, f"embd-{uuid.uuid4().hex}", f"{version.model}/{version.version}"
