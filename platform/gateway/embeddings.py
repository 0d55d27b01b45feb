"""From an embeddings request to vectors: token caps, batching, usage, metrics."""

from __future__ import annotations

import uuid

from vigil.platform.api.openai_schemas import (
    Embedding,
    EmbeddingList,
    EmbeddingRequest,
    EmbeddingUsage,
)
from vigil.platform.errors import InvalidRequest, PermissionDenied
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
        model = embedder.model
        texts = body.texts()
        counts = [model.count_tokens(t) for t in texts]
        for i, n in enumerate(counts):
            if n > model.max_seq_len:
                where = "input" if isinstance(body.input, str) else f"input[{i}]"
                raise InvalidRequest(
                    f"'{where}' has {n} tokens, more than this model's limit of "
                    f"{model.max_seq_len}. Shorten or split the text.",
                    param=where,
                    code="context_length_exceeded",
                )
        ok = False
        try:
            vectors = await embedder.embed(texts)
            ok = True
        finally:
            self.recorder.record_embedding(body.model, sum(counts), arrival_ts, ok)
        total = sum(counts)
        result = EmbeddingList(
            data=[Embedding(i, v) for i, v in enumerate(vectors)],
            model=body.model,
            usage=EmbeddingUsage(total, total),
        )
        served_by = f"{version.model}/{version.version}"
        return result, f"embd-{uuid.uuid4().hex}", served_by
