"""The names the gateway serves and which model version takes each request.

A deployment is the `model` clients send: a stable version and perhaps a canary with a
share of the traffic. Rollout: a deployment's traffic moves to a new stable version
only once some worker has it ready; until then the version it replaced keeps serving
(and stays assigned to the workers). A canary gets its share only while it is ready
somewhere. An embedding model is deployed the same way (its versions are of the embed
kind), and served at /v1/embeddings only.
"""

from __future__ import annotations

import time

from vigil.engine.bundled import ModelKind
from vigil.platform.control.specs import DeploymentSpec, VersionRef
from vigil.platform.errors import InvalidRequest, ModelNotFound
from vigil.platform.gateway.workers import WorkerRegistry
from vigil.platform.wire.worker import PrecisionWire, SlotSpec, VersionWire

LONG_POOL_SUFFIX = "#long"
_KIND_NAMES = {ModelKind.EMBED: "an embedding model", ModelKind.GENERATE: "a generation model"}


def engine_key(version: VersionRef, long_pool: bool = False) -> str:
    """The engine slot that runs a version's requests: its own, or its long-prompt pool's."""
    return version.key + (LONG_POOL_SUFFIX if long_pool else "")


def version_key(engine: str) -> str:
    """The version an engine slot runs (a long-prompt pool's engine runs its version)."""
    return engine.removesuffix(LONG_POOL_SUFFIX)


def engine_slots(deployments: list[DeploymentSpec]) -> list[SlotSpec]:
    """One engine per version in use, one more per version a long-prompt pool uses
    (sized for the largest pool on it)."""
    slots: dict[str, SlotSpec] = {}
    for d in deployments:
        for version in d.versions:
            slots.setdefault(version.key, SlotSpec(version.key, VersionWire.of(version)))
            pool = d.long_prompt_pool
            if pool is not None:
                key = engine_key(version, long_pool=True)
                old = slots.get(key)
                seqs = max(pool.max_num_seqs, (old.max_num_seqs or 0) if old else 0)
                slots[key] = SlotSpec(key, VersionWire.of(version), seqs)
    return list(slots.values())


class TrafficSplit:
    """Picks exactly `weight` of every 100 requests, spread evenly (smooth weighted round
    robin): a 10% canary gets 10% of any 100 in a row, and so does a 10% shadow's mirror."""

    def __init__(self) -> None:
        self._credit: dict[tuple[str, str], int] = {}  # (deployment, canary|shadow) -> credit

    def to_canary(self, spec: DeploymentSpec) -> bool:
        return spec.canary is not None and self._pick((spec.name, "canary"), spec.canary_weight)

    def to_shadow(self, spec: DeploymentSpec) -> bool:
        return spec.shadow is not None and self._pick((spec.name, "shadow"), spec.shadow_weight)

    def _pick(self, key: tuple[str, str], weight: int) -> bool:
        if weight <= 0:
            return False
        credit = self._credit.get(key, 0) + weight
        hit = credit >= 100
        self._credit[key] = credit - 100 if hit else credit
        return hit


class ServingView:
    def __init__(self, workers: WorkerRegistry) -> None:
        self.workers = workers
        self.created_ts = time.time()  # wall clock, for /v1/models
        self.deployments: dict[str, DeploymentSpec] = {}
        self.split = TrafficSplit()
        self._serving: dict[str, VersionRef] = {}  # deployment -> the stable now serving

    def set_deployments(self, deployments: list[DeploymentSpec]) -> None:
        self.deployments = {d.name: d for d in deployments}
        for d in deployments:
            self._serving.setdefault(d.name, d.stable)
        for name in [n for n in self._serving if n not in self.deployments]:
            del self._serving[name]
        self._advance()

    def _advance(self) -> None:
        """Move each deployment to its new stable version once it is ready somewhere."""
        for name, spec in self.deployments.items():
            if self._serving[name] != spec.stable and self.workers.serving(spec.stable.key):
                self._serving[name] = spec.stable

    def serve_instead(self, name: str, version: VersionRef) -> None:
        """Serve `version` instead of the stable one until that is ready somewhere."""
        if name in self._serving:
            self._serving[name] = version

    def serving(self, spec: DeploymentSpec) -> VersionRef:
        """The stable version now taking the deployment's traffic."""
        self._advance()
        return self._serving.get(spec.name, spec.stable)

    def desired_slots(self) -> list[SlotSpec]:
        """What every worker should run: the view, plus stables still being replaced."""
        self._advance()
        kept = [
            DeploymentSpec(
                f"{name} (serving)",
                version,
                long_prompt_pool=self.deployments[name].long_prompt_pool,
            )
            for name, version in self._serving.items()
            if version != self.deployments[name].stable
        ]
        return engine_slots([*self.deployments.values(), *kept])

    def versions_in_use(self) -> list[VersionRef]:
        versions = {v.key: v for d in self.deployments.values() for v in d.versions}
        versions.update((v.key, v) for v in self._serving.values())
        return list(versions.values())

    def serving_versions(self) -> list[VersionRef]:
        """Every deployment's serving version: what must be ready for the gateway to be
        (a version still rolling out does not count)."""
        return [self._serving.get(d.name, d.stable) for d in self.deployments.values()]

    def names(self) -> list[str]:
        return list(self.deployments)

    def precision(self, name: str) -> PrecisionWire | None:
        """What the deployment's serving version runs as on a worker that loaded it
        (None: none has yet)."""
        spec = self.deployments.get(name)
        if spec is None:
            return None
        reports = self.workers.slot_states(self.serving(spec).key)
        return next((r.precision for r in reports if r.precision is not None), None)

    def deployment(self, name: str) -> DeploymentSpec:
        """The generation deployment called `name`."""
        return self._of_kind(name, ModelKind.GENERATE)

    def embedding(self, name: str) -> DeploymentSpec:
        """The embedding deployment called `name`."""
        return self._of_kind(name, ModelKind.EMBED)

    def _of_kind(self, name: str, kind: ModelKind) -> DeploymentSpec:
        spec = self.deployments.get(name)
        if spec is None:
            raise ModelNotFound(name, self.names())
        if spec.stable.kind is not kind:
            use = (
                "/v1/embeddings"
                if spec.stable.kind is ModelKind.EMBED
                else "/v1/chat/completions or /v1/completions"
            )
            raise InvalidRequest(
                f"The model '{name}' is {_KIND_NAMES[spec.stable.kind]}; use {use}.",
                param="model",
                code="wrong_model_kind",
            )
        return spec

    def choose_version(self, spec: DeploymentSpec) -> VersionRef:
        """The canary for its share of requests while it is ready, else the stable now
        serving."""
        canary = spec.canary
        if canary is not None and self.workers.serving(canary.key) and self.split.to_canary(spec):
            return canary
        return self.serving(spec)

    def is_ready(self, spec: DeploymentSpec) -> bool:
        return bool(self.workers.serving(self.serving(spec).key))
