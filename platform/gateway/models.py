"""The names the gateway serves (deployments and embedding models), which version,
worker and engine take each request, and the errors for names it cannot serve.

Rollout: a deployment's traffic moves to a new stable version only once some worker
has it ready; until then the version it replaced keeps serving (and stays assigned to
the workers). A canary gets its share only while it is ready somewhere.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, replace

import httpx

from vigil.engine.bundled import ModelKind
from vigil.engine.tokenizer import Tokenizer
from vigil.platform.control.specs import DeploymentSpec, VersionRef
from vigil.platform.errors import InvalidRequest, ModelNotFound, ServiceUnavailable
from vigil.platform.gateway.admission import LoadSnapshot
from vigil.platform.gateway.load import LoadTracker
from vigil.platform.gateway.remote import EngineLimits, RemoteEmbedder, RemoteEngine
from vigil.platform.gateway.router import Router, prefix_key
from vigil.platform.gateway.tokenizers import TokenizerCache
from vigil.platform.gateway.workers import Replica, WorkerRegistry
from vigil.platform.telemetry.metrics import EngineSnapshot
from vigil.platform.worker.protocol import SlotSpec, VersionWire

LONG_POOL_SUFFIX = "#long"
LOADED_NOT_READY = 0.99  # the progress of a version loaded on a worker, not yet served


def engine_slots(deployments: list[DeploymentSpec], embed: list[VersionRef]) -> list[SlotSpec]:
    """One engine per version in use, one more per version a long-prompt pool uses
    (sized for the largest pool on it), one per embedding model."""
    slots: dict[str, SlotSpec] = {}
    for d in deployments:
        for version in d.versions:
            slots.setdefault(version.key, SlotSpec(version.key, VersionWire.of(version)))
            pool = d.long_prompt_pool
            if pool is not None:
                key = version.key + LONG_POOL_SUFFIX
                old = slots.get(key)
                seqs = max(pool.max_num_seqs, (old.max_num_seqs or 0) if old else 0)
                slots[key] = SlotSpec(key, VersionWire.of(version), seqs)
    for version in embed:
        slots[version.key] = SlotSpec(version.key, VersionWire.of(version))
    return list(slots.values())


@dataclass(frozen=True, slots=True)
class Target:
    """One engine on one worker that can take a request, and the load of that engine
    across every worker that runs it."""

    key: str
    version: VersionRef
    engine: RemoteEngine
    load: LoadTracker
    replicas: tuple[Replica, ...]

    @property
    def served_by(self) -> str:
        return f"{self.version.model}/{self.version.version}"

    def snapshot(self) -> LoadSnapshot:
        """The engine's load across its workers. Running is the gateway's own count
        (sent, started, not ended): heartbeat stats lag by up to a second, long enough
        to count a finished request and its successor both."""
        reports = [r.slots[self.key] for r in self.replicas]
        prefill = [rep.prefill_tokens_per_s for rep in reports if rep.prefill_tokens_per_s]
        decode = [rep.decode_step_s for rep in reports if rep.decode_step_s]
        snap = self.load.snapshot(
            max_num_seqs=sum(rep.limits.max_num_seqs for rep in reports if rep.limits),
            prefill_tokens_per_s=sum(prefill) if prefill else None,  # replicas add up
            decode_step_s=max(decode) if decode else None,  # the slowest streams matter
        )
        in_flight = sum(r.in_flight.get(self.key, 0) for r in self.replicas)
        return replace(snap, num_running=max(0, in_flight - sum(snap.queued.values())))


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
    def __init__(
        self,
        registry: WorkerRegistry,
        tokenizers: TokenizerCache,
        client: httpx.AsyncClient,
        worker_token: str,
        embed: list[VersionRef],
        rng: random.Random | None = None,
        round_robin: bool = False,
    ) -> None:
        self.registry = registry
        self.tokenizers = tokenizers
        self.created_ts = time.time()  # wall clock, for /v1/models
        self.deployments: dict[str, DeploymentSpec] = {}
        self.embed = {v.model: v for v in embed}
        self.loads: dict[str, LoadTracker] = {}
        self.canary = CanarySplit()
        self._serving: dict[str, VersionRef] = {}  # deployment -> the stable now serving
        self._client = client
        self._token = worker_token
        self._rng = rng or random.Random()
        self._router = Router(self._rng, round_robin)

    # ---- the serving view ----------------------------------------------------------

    def set_deployments(self, deployments: list[DeploymentSpec]) -> None:
        self.deployments = {d.name: d for d in deployments}
        for d in deployments:
            self._serving.setdefault(d.name, d.stable)
        for name in [n for n in self._serving if n not in self.deployments]:
            del self._serving[name]
        self._advance()
        for spec in deployments:
            for version in spec.versions:
                self.tokenizers.get(version)  # start loading early

    def _advance(self) -> None:
        """Move each deployment to its new stable version once it is ready somewhere."""
        for name, spec in self.deployments.items():
            if self._serving[name] != spec.stable and self.registry.serving(spec.stable.key):
                self._serving[name] = spec.stable

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
        return engine_slots([*self.deployments.values(), *kept], list(self.embed.values()))

    def versions_in_use(self) -> list[VersionRef]:
        versions = {v.key: v for d in self.deployments.values() for v in d.versions}
        versions.update((v.key, v) for v in self._serving.values())
        versions.update((v.key, v) for v in self.embed.values())
        return list(versions.values())

    def version_states(self) -> dict[str, str]:
        """model@version -> ready (on some worker), failed (on every one), or loading."""
        states = {}
        for version in self.versions_in_use():
            reports = self.registry.slot_states(version.key)
            if any(r.state == "ready" for r in reports):
                ready = version.kind is ModelKind.EMBED or self.tokenizers.get(version)
                states[version.key] = "ready" if ready else "loading"
            elif reports and all(r.state == "failed" for r in reports):
                states[version.key] = "failed"
            else:
                states[version.key] = "loading"
        return states

    def serving_ready(self, states: dict[str, str]) -> bool:
        """Every deployment's serving version and every embedding model is ready (a
        version still rolling out, such as a canary loading, does not count)."""
        serving = [self._serving.get(d.name, d.stable) for d in self.deployments.values()]
        keys = [v.key for v in [*serving, *self.embed.values()]]
        return bool(keys) and all(states.get(key) == "ready" for key in keys)

    def version_progress(self, states: dict[str, str]) -> dict[str, float]:
        """model@version -> how far its load has come (0-1), on the worker furthest
        along, for the versions `states` (version_states) says are loading. Under 1
        until it is ready: after the worker, the gateway loads the version's tokenizer."""
        return {
            key: min(
                LOADED_NOT_READY,
                max((r.progress for r in self.registry.slot_states(key)), default=0.0),
            )
            for key, state in states.items()
            if state == "loading"
        }

    def version_error(self, key: str) -> str | None:
        errors = [r.error for r in self.registry.slot_states(key) if r.error]
        return errors[0] if errors else self.tokenizers.errors.get(key)

    # ---- lookups -------------------------------------------------------------------

    def names(self) -> list[str]:
        return [*self.deployments, *self.embed]

    def deployment(self, name: str) -> DeploymentSpec:
        spec = self.deployments.get(name)
        if spec is None:
            if name in self.embed:
                raise InvalidRequest(
                    f"The model '{name}' is an embedding model; use /v1/embeddings.",
                    param="model",
                    code="wrong_model_kind",
                )
            raise ModelNotFound(name, self.names())
        return spec

    def choose_version(self, spec: DeploymentSpec) -> VersionRef:
        """The canary for its share of requests while it is ready, else the stable now
        serving."""
        canary = spec.canary
        if canary is not None and self.registry.serving(canary.key) and self.canary.to_canary(spec):
            return canary
        self._advance()
        return self._serving.get(spec.name, spec.stable)

    def is_ready(self, spec: DeploymentSpec) -> bool:
        return bool(self.registry.serving(self._serving.get(spec.name, spec.stable).key))

    def tokenizer(self, version: VersionRef) -> Tokenizer:
        tokenizer = self.tokenizers.get(version)
        if tokenizer is None:
            if version.key in self.tokenizers.errors:
                raise ServiceUnavailable(
                    f"The tokenizer of '{version.key}' failed to load: "
                    f"{self.tokenizers.errors[version.key]}",
                    code="model_failed",
                )
            raise ServiceUnavailable(
                f"The model version '{version.key}' is still loading; retry shortly.",
                code="model_loading",
                retry_after_s=5,
            )
        return tokenizer

    def target(
        self, version: VersionRef, long_pool: bool = False, prompt_ids: list[int] | None = None
    ) -> Target:
        key = version.key + (LONG_POOL_SUFFIX if long_pool else "")
        replicas = self.registry.serving(key)
        if not replicas:
            self._unavailable(version.key)
        loads = [r.load(key) for r in replicas]
        choice = self._router.choose(key, loads, prefix_key(prompt_ids) if prompt_ids else None)
        replica = self.registry.replicas[choice.replica]
        limits = replica.slots[key].limits
        assert limits is not None
        engine = RemoteEngine(
            self._client,
            replica.id,
            replica.address,
            key,
            EngineLimits(limits.max_model_len, limits.kv_capacity_tokens, limits.max_num_seqs),
            self._token,
            self.registry.mark_failed,
        )
        load = self.loads.setdefault(key, LoadTracker())
        return Target(key, version, engine, load, tuple(replicas))

    def dispatched(self, target: Target, prompt_tokens: int) -> None:
        replica = self.registry.replicas.get(target.engine.replica)
        if replica is not None:
            replica.in_flight[target.key] = replica.in_flight.get(target.key, 0) + 1
            pending = replica.pending_prompt
            pending[target.key] = pending.get(target.key, 0) + prompt_tokens

    def started(self, target: Target, prompt_tokens: int) -> None:
        """The request's first event came back (or it ended without one)."""
        replica = self.registry.replicas.get(target.engine.replica)
        if replica is not None:
            pending = replica.pending_prompt
            pending[target.key] = max(0, pending.get(target.key, 0) - prompt_tokens)

    def ended(self, target: Target) -> None:
        replica = self.registry.replicas.get(target.engine.replica)
        if replica is not None and replica.in_flight.get(target.key, 0) > 0:
            replica.in_flight[target.key] -= 1

    def embedder(self, name: str) -> tuple[RemoteEmbedder, VersionRef]:
        version = self.embed.get(name)
        if version is None:
            if name in self.deployments:
                raise InvalidRequest(
                    f"The model '{name}' is a generation model; use /v1/chat/completions or "
                    "/v1/completions.",
                    param="model",
                    code="wrong_model_kind",
                )
            raise ModelNotFound(name, self.names())
        replicas = self.registry.serving(version.key)
        if not replicas:
            self._unavailable(version.key)
        replica = self._rng.choice(replicas)
        return RemoteEmbedder(
            self._client,
            replica.id,
            replica.address,
            version.key,
            self._token,
            self.registry.mark_failed,
        ), version

    def _unavailable(self, key: str) -> None:
        reports = self.registry.slot_states(key)
        failed = [r for r in reports if r.state == "failed"]
        if reports and len(failed) == len(reports):
            raise ServiceUnavailable(
                f"The model version '{key}' failed to load: {failed[0].error}", code="model_failed"
            )
        raise ServiceUnavailable(
            f"The model version '{key}' is not ready on any worker yet; retry shortly.",
            code="model_loading",
            retry_after_s=5,
        )

    def snapshots(self) -> list[EngineSnapshot]:
        return [
            EngineSnapshot(key, replica, stats)
            for key, replica, stats in self.registry.engine_stats()
        ]
