"""From texts asked of an embedding deployment to vectors computed on a worker by its
stable version or, for its share, its canary: placed by the router among the workers
that have it ready, held by a lease in the load book while it runs (so the router sees
it), usage, metrics and SLIs here; token caps there (the worker holds the model's
tokenizer and its limit)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from vigil.engine.request import Priority, RequestClock, RequestId
from vigil.platform.control.specs import DeploymentSpec, VersionRef
from vigil.platform.errors import InvalidRequest, PermissionDenied
from vigil.platform.gateway.auth import Principal
from vigil.platform.gateway.link import WorkerLink, WorkerUnreachable
from vigil.platform.gateway.placement import Placer
from vigil.platform.gateway.serving import ServingView, engine_key
from vigil.platform.telemetry.recorder import RequestRecorder
from vigil.platform.wire.worker import EmbedResult


@dataclass(frozen=True, slots=True)
class Embeddings:
    vectors: list[list[float]]  # one per text, in order
    num_tokens: int
    served_by: str  # model/version
    request_id: RequestId


class EmbeddingService:
    def __init__(
        self,
        view: ServingView,
        link: WorkerLink,
        placer: Placer,
        recorder: RequestRecorder,
        max_chars: int,
    ) -> None:
        self.view = view
        self.link = link
        self.placer = placer
        self.recorder = recorder
        self.max_chars = max_chars

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
        request_id = RequestId(f"embd-{uuid.uuid4().hex}")
        num_tokens, ok = 0, False
        try:
            result = await self._embed(spec, version, request_id, texts, arrival_ts)
            num_tokens, ok = result.num_tokens, True
        finally:
            self.recorder.embedding(model, version.key, num_tokens, arrival_ts, ok)
        served_by = f"{version.model}/{version.version}"
        return Embeddings(result.vectors, num_tokens, served_by, request_id)

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

    async def _embed(
        self,
        spec: DeploymentSpec,
        version: VersionRef,
        request_id: RequestId,
        texts: list[str],
        arrival_ts: float,
    ) -> EmbedResult:
        """On the replica the router picks; one that cannot be reached becomes a suspect
        and the next choice gets the texts. Its lease counts it in flight there until
        the answer is back; its outcome is the recorder's (above), not the lease's."""
        key = engine_key(version)
        while True:
            replica = self.placer.choose_embedder(key, self.placer.serving(key))
            lease = self.placer.loads.open(
                request_id,
                spec.name,
                version.key,
                key,
                replica.id,
                Priority.INTERACTIVE,
                0,  # counted on the worker, which holds the tokenizer
                0,
                RequestClock(arrival_ts),
            )
            try:
                return await self.link.embed(replica, key, texts)
            except WorkerUnreachable:
                continue
            finally:
                lease.discard()
