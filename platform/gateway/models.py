"""The names the gateway serves (deployments and embedding models), which version and
engine take each request, and the errors for names it cannot serve."""

from __future__ import annotations

import time
from dataclasses import dataclass

from vigil.engine.async_engine import AsyncLLMEngine
from vigil.engine.bundled import ModelKind
from vigil.engine.embed_batcher import AsyncEmbedder
from vigil.platform.control.specs import DeploymentSpec, VersionRef
from vigil.platform.errors import InvalidRequest, ModelNotFound, ServiceUnavailable
from vigil.platform.gateway.admission import LoadSnapshot
from vigil.platform.gateway.load import LoadTracker
from vigil.platform.telemetry.metrics import EngineSnapshot
from vigil.platform.worker.local import EngineSlot, LocalWorker, ModelState

LONG_POOL_SUFFIX = "#long"


def engine_slots(deployments: list[DeploymentSpec]) -> list[EngineSlot]:
    """One engine per version in use, and one more per version a long-prompt pool uses
    (sized for the largest pool on it)."""
    slots: dict[str, EngineSlot] = {}
    for d in deployments:
        for version in d.versions:
            slots.setdefault(version.key, EngineSlot(version.key, version))
            pool = d.long_prompt_pool
            if pool is not None:
                key = version.key + LONG_POOL_SUFFIX
                seqs = max(pool.max_num_seqs, (slots[key].max_num_seqs or 0) if key in slots else 0)
                slots[key] = EngineSlot(key, version, seqs)
    return list(slots.values())


@dataclass(frozen=True, slots=True)
class Target:
    """One engine that can take a request, the version it runs, and its load."""

    key: str
    version: VersionRef
    engine: AsyncLLMEngine
    load: LoadTracker

    @property
    def served_by(self) -> str:
        return f"{self.version.model}/{self.version.version}"

    def snapshot(self) -> LoadSnapshot:
        return self.load.snapshot(
            num_running=self.engine.stats().num_running,
            max_num_seqs=self.engine.core.config.max_num_seqs,
        )


class CanarySplit:
    """Sends exactly `weight` of every 100 requests to the canary, spread evenly
    (smooth weighted round robin), so a 10% canary gets 10% of any 100 in a row."""

    def __init__(self) -> None:
        self._credit: dict[str, int] = {}

    def to_canary(self, spec: DeploymentSpec) -> bool:
        if spec.canary is None or spec.canary_weight <= 0:
            return False
        credit = self._credit.get(spec.name, 0) + spec.canary_weight
        hit = credit >= 100
        self._credit[spec.name] = credit - 100 if hit else credit
        return hit


class ModelDirectory:
    def __init__(self, worker: LocalWorker, deployments: list[DeploymentSpec]) -> None:
        self.worker = worker
        self.created_ts = time.time()  # wall clock, for /v1/models
        self.deployments = {d.name: d for d in deployments}
        self.loads = {slot.key: LoadTracker() for slot in worker.slots}
        self.canary = CanarySplit()

    def names(self) -> list[str]:
        embedders = [v.model for v in self.worker.versions if v.kind is ModelKind.EMBED]
        return [*self.deployments, *embedders]

    def deployment(self, name: str) -> DeploymentSpec:
        spec = self.deployments.get(name)
        if spec is None:
            if self.worker.embed_version(name) is not None:
                raise InvalidRequest(
                    f"The model '{name}' is an embedding model; use /v1/embeddings.",
                    param="model",
                    code="wrong_model_kind",
                )
            raise ModelNotFound(name, self.names())
        return spec

    def choose_version(self, spec: DeploymentSpec) -> VersionRef:
        """The canary for its share of requests once it is loaded, else the stable."""
        canary = spec.canary
        if canary is not None and canary.key in self.worker.llms and self.canary.to_canary(spec):
            return canary
        return spec.stable

    def target(self, version: VersionRef, long_pool: bool = False) -> Target:
        key = version.key + (LONG_POOL_SUFFIX if long_pool else "")
        engine = self.worker.llms.get(key)
        if engine is None:
            self._unavailable(version.key)
        assert engine is not None
        return Target(key, version, engine, self.loads[key])

    def is_ready(self, spec: DeploymentSpec) -> bool:
        return spec.stable.key in self.worker.llms

    def embedder(self, name: str) -> tuple[AsyncEmbedder, VersionRef]:
        version = self.worker.embed_version(name)
        if version is None:
            if name in self.deployments:
                raise InvalidRequest(
                    f"The model '{name}' is a generation model; use /v1/chat/completions or "
                    "/v1/completions.",
                    param="model",
                    code="wrong_model_kind",
                )
            raise ModelNotFound(name, self.names())
        embedder = self.worker.embedders.get(name)
        if embedder is None:
            self._unavailable(version.key)
        assert embedder is not None
        return embedder, version

    def _unavailable(self, key: str) -> None:
        state = self.worker.states.get(key)
        if state is ModelState.FAILED:
            raise ServiceUnavailable(
                f"The model version '{key}' failed to load: {self.worker.errors.get(key)}",
                code="model_failed",
            )
        raise ServiceUnavailable(
            f"The model version '{key}' is still loading; retry shortly.",
            code="model_loading",
            headers={"Retry-After": "5"},
        )

    def snapshots(self) -> list[EngineSnapshot]:
        return [EngineSnapshot(key, engine.stats()) for key, engine in self.worker.llms.items()]
