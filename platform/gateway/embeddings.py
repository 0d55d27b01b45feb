"""From texts asked of an embedding deployment to vectors computed on a worker, the way
a generation goes (pipeline.py), one step at a time:

    resolve    the deployment (404; 403 when the key may not use it)
    input      size check; on the version the canary split picks, its tokenizer, once,
               off the event loop, each text within the model's window (embed_input.py)
    place      the replicas that have the engine ready (503 when none)
    admit      admission.decide_embedding: admit | shed (429 + Retry-After)
    dispatch   the router's choice of replica, a lease in the load book while the
               vectors are computed (so the router and admission see it there), the
               token ids sent; a replica that cannot be reached becomes a suspect and
               the next choice gets them

Usage, metrics and SLIs are recorded here, from the request's arrival: an embedding's
whole answer is its first token.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from vigil.engine.request import Priority, RequestClock, RequestId
from vigil.platform.control.specs import DeploymentSpec, VersionRef
from vigil.platform.errors import PermissionDenied
from vigil.platform.gateway.admission import Verdict, decide_embedding, shed_error
from vigil.platform.gateway.auth import Principal
from vigil.platform.gateway.embed_input import check_input_size, tokenize_inputs
from vigil.platform.gateway.link import WorkerLink, WorkerUnreachable
from vigil.platform.gateway.placement import Placer
from vigil.platform.gateway.serving import ServingView, engine_key
from vigil.platform.gateway.tokenizers import TokenizerCache
from vigil.platform.gateway.workers import Replica
from vigil.platform.slo.actions import ActionBoard
from vigil.platform.telemetry.recorder import RequestRecorder


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
        tokenizers: TokenizerCache,
        link: WorkerLink,
        placer: Placer,
        recorder: RequestRecorder,
        max_chars: int,
        actions: ActionBoard,
    ) -> None:
        self.view = view
        self.tokenizers = tokenizers
        self.link = link
        self.placer = placer
        self.recorder = recorder
        self.max_chars = max_chars
        self.actions = actions

    async def embed(
        self, model: str, texts: list[str], principal: Principal, arrival_ts: float
    ) -> Embeddings:
        """`texts` as the client sent them; errors about one name it as `input[i]`."""
        spec = self._resolve(model, principal)
        check_input_size(texts, self.max_chars)
        version = self.view.choose_version(spec)
        ids = await tokenize_inputs(texts, self.tokenizers.require(version))
        key, priority = engine_key(version), principal.priority
        replicas = self.placer.serving(key)  # 503 when no worker has it ready
        self._admit(spec, version, key, priority)
        request_id = RequestId(f"embd-{uuid.uuid4().hex}")
        num_tokens = sum(len(row) for row in ids)
        ok = False
        try:
            vectors = await self._dispatch(
                spec, version, replicas, request_id, ids, priority, arrival_ts
            )
            ok = True
        finally:
            self.recorder.embedding(spec.name, version.key, priority, num_tokens, arrival_ts, ok)
        served_by = f"{version.model}/{version.version}"
        return Embeddings(vectors, num_tokens, served_by, request_id)

    def _resolve(self, model: str, principal: Principal) -> DeploymentSpec:
        spec = self.view.embedding(model)
        if not principal.may_use(model):
            raise PermissionDenied(
                f"This API key may not use the model '{model}'.",
                param="model",
                code="model_not_allowed",
            )
        return spec

    def _admit(
        self, spec: DeploymentSpec, version: VersionRef, key: str, priority: Priority
    ) -> None:
        """Admitted, or RateLimited (429 + Retry-After) when the engine's queue is full."""
        actions = self.actions.get(spec.name)
        admission = decide_embedding(priority, self.placer.loads.queued(key), spec, actions)
        verdict, reason = admission.verdict.value, admission.reason.value
        self.recorder.admission(spec.name, version.key, verdict, reason, priority)
        if admission.verdict is Verdict.SHED:
            raise shed_error(spec, admission)

    async def _dispatch(
        self,
        spec: DeploymentSpec,
        version: VersionRef,
        replicas: list[Replica],
        request_id: RequestId,
        ids: list[list[int]],
        priority: Priority,
        arrival_ts: float,
    ) -> list[list[float]]:
        """On the replica the router picks, held by a lease until the vectors are back;
        its outcome is the recorder's (above), not the lease's."""
        key = engine_key(version)
        num_tokens = sum(len(row) for row in ids)
        while True:
            replica = self.placer.choose_embedder(key, replicas)
            lease = self.placer.loads.open(
                request_id,
                spec.name,
                version.key,
                key,
                replica.id,
                priority,
                num_tokens,
                0,
                RequestClock(arrival_ts),
            )
            try:
                return (await self.link.embed(replica, key, ids)).vectors
            except WorkerUnreachable:
                replicas = self.placer.serving(key)  # the suspect left out
                continue
            finally:
                lease.discard()
