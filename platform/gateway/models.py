"""The names the gateway serves (deployments and embedding models), the engines behind
them, and the errors for names it cannot serve."""

from __future__ import annotations

import time
from dataclasses import dataclass

from vigil.engine.async_engine import AsyncLLMEngine
from vigil.engine.bundled import ModelKind
from vigil.engine.embed_batcher import AsyncEmbedder
from vigil.platform.errors import InvalidRequest, ModelNotFound, ServiceUnavailable
from vigil.platform.gateway.admission import LoadSnapshot
from vigil.platform.gateway.deployment import DeploymentSpec
from vigil.platform.gateway.load import LoadTracker
from vigil.platform.telemetry.metrics import EngineSnapshot
from vigil.platform.worker.local import EngineSlot, LocalWorker, ModelState

LONG_POOL_SUFFIX = "#long"


def engine_slots(deployments: list[DeploymentSpec]) -> list[EngineSlot]:
    slots = []
    for d in deployments:
        slots.append(EngineSlot(d.name, d.model))
        if d.long_prompt_pool is not None:
            pool = d.long_prompt_pool
            slots.append(EngineSlot(d.name + LONG_POOL_SUFFIX, d.model, pool.max_num_seqs))
    return slots


@dataclass(frozen=True, slots=True)
class Target:
    """One engine that can take a request, and its load."""

    key: str
    engine: AsyncLLMEngine
    load: LoadTracker

    def snapshot(self) -> LoadSnapshot:
        return self.load.snapshot(
            num_running=self.engine.stats().num_running,
            max_num_seqs=self.engine.core.config.max_num_seqs,
        )


class ModelDirectory:
    def __init__(self, worker: LocalWorker, deployments: list[DeploymentSpec]) -> None:
        self.worker = worker
        self.created_ts = time.time()  # wall clock, for /v1/models
        self.deployments = {d.name: d for d in deployments}
        self.loads = {slot.key: LoadTracker() for slot in worker.slots}

    def names(self) -> list[str]:
        embedders = [s.name for s in self.worker.sources if s.kind is ModelKind.EMBED]
        return [*self.deployments, *embedders]

    def deployment(self, name: str) -> DeploymentSpec:
        spec = self.deployments.get(name)
        if spec is None:
            source = self.worker.source(name)
            if source is not None and source.kind is ModelKind.EMBED:
                raise InvalidRequest(
                    f"The model '{name}' is an embedding model; use /v1/embeddings.",
                    param="model",
                    code="wrong_model_kind",
                )
            raise ModelNotFound(name, self.names())
        return spec

    def target(self, spec: DeploymentSpec, long_pool: bool = False) -> Target:
        key = spec.name + (LONG_POOL_SUFFIX if long_pool else "")
        engine = self.worker.llms.get(key)
        if engine is None:
            self._unavailable(spec.model)
        assert engine is not None
        return Target(key, engine, self.loads[key])

    def is_ready(self, spec: DeploymentSpec) -> bool:
        return spec.name in self.worker.llms

    def served_by(self, spec: DeploymentSpec) -> str:
        source = self.worker.source(spec.model)
        return f"{spec.model}/{source.version if source else 'unknown'}"

    def embedder(self, name: str) -> AsyncEmbedder:
        embedder = self.worker.embedders.get(name)
        if embedder is not None:
            return embedder
        source = self.worker.source(name)
        if name in self.deployments or (source and source.kind is ModelKind.GENERATE):
            raise InvalidRequest(
                f"The model '{name}' is a generation model; use /v1/chat/completions or "
                "/v1/completions.",
                param="model",
                code="wrong_model_kind",
            )
        if source is None:
            raise ModelNotFound(name, self.names())
        self._unavailable(name)
        raise AssertionError("unreachable")

    def _unavailable(self, model: str) -> None:
        state = self.worker.states.get(model)
        if state is ModelState.FAILED:
            raise ServiceUnavailable(
                f"The model '{model}' failed to load: {self.worker.errors.get(model)}",
                code="model_failed",
            )
        raise ServiceUnavailable(
            f"The model '{model}' is still loading; retry shortly.",
            code="model_loading",
            headers={"Retry-After": "5"},
        )

    def snapshots(self) -> list[EngineSnapshot]:
        return [EngineSnapshot(key, engine.stats()) for key, engine in self.worker.llms.items()]
