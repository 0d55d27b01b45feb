"""From texts asked of an embedding deployment to vectors computed on a worker by its
stable version or, for its share, its canary: usage, metrics and SLIs here, token caps
there (the worker holds the model's tokenizer and its limit)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from vigil.platform.errors import InvalidRequest, PermissionDenied
from vigil.platform.gateway.auth import Principal
from vigil.platform.gateway.link import WorkerLink, WorkerUnreachable
from vigil.platform.gateway.serving import ServingView
from vigil.platform.telemetry.recorder import RequestRecorder
from vigil.platform.wire.worker import EmbedResult


@dataclass(frozen=True, slots=True)
class Embeddings:
    vectors: list[list[float]]  # one per text, in order
    num_tokens: int
    served_by: str  # model/version


class EmbeddingService:
    def __init__(
        self,
        view: ServingView,
        link: WorkerLink,
        recorder: RequestRecorder,
        max_chars: int,
        rng: random.Random | None = None,
    ) -> None:
        self.view = view
        self.link = link
        self.recorder = recorder
        self.max_chars = max_chars
        self._rng = rng or random.Random()

    async def embed(
        self, model: str, texts: list[str], principal: Principal, arrival_ts: float
    ) -> Embeddings:
        """`texts` as the client sent them; errors about one name it as `input[i]`."""
        spec = self.view.embedding(model)
        if not principal.may_use(model):
            raise PermissionDenied(
                f"This API key may not use the model '{model}'.",
                param="model",
                code="model_not_allowed",
            )
        self._check_size(texts)
        version = self.view.choose_version(spec)
        num_tokens, ok = 0, False
        try:
            result = await self._embed(version.key, texts)
            num_tokens, ok = result.num_tokens, True
        finally:
            self.recorder.embedding(model, version.key, num_tokens, arrival_ts, ok)
        return Embeddings(result.vectors, num_tokens, f"{version.model}/{version.version}")

    def _check_size(self, texts: list[str]) -> None:
        """Each input, and all of them together, within max_chars: before a worker
        spends time counting their tokens."""
        over = next((i for i, t in enumerate(texts) if len(t) > self.max_chars), None)
        total = sum(len(t) for t in texts)
        if over is None and total <= self.max_chars:
            return
        param = "input" if over is None else f"input[{over}]"
        size = total if over is None else len(texts[over])
        raise InvalidRequest(
            f"'{param}' holds {size} characters, over the {self.max_chars} this server takes "
            "in one request; shorten or split it.",
            param=param,
            code="input_too_large",
        )

    async def _embed(self, key: str, texts: list[str]) -> EmbedResult:
        """On a replica picked at random; one that cannot be reached becomes a suspect
        and another is tried."""
        while replicas := self.view.workers.serving(key):
            try:
                return await self.link.embed(self._rng.choice(replicas), key, texts)
            except WorkerUnreachable:
                continue
        raise self.view.workers.unavailable(key)
