"""Where a request runs: the engine of the version (its own, or its long-prompt pool's
for a long prompt) and the replica (the router weighs load and prefix affinity), and the
load there that admission decides on. Generations and embeddings are placed alike.

The choices are functions of a snapshot of the fleet (the replicas serving an engine,
as their heartbeats last described them, and the gateway's own counts of what it sent
each); `Placer` holds the router and the memory of which prefixes each engine caches.
"""

from __future__ import annotations

from dataclasses import dataclass

from vigil.platform.control.specs import DeploymentSpec, VersionRef
from vigil.platform.gateway.admission import LoadSnapshot
from vigil.platform.gateway.grammars import OutputPlan
from vigil.platform.gateway.lease import LoadBook, ReplicaCounts
from vigil.platform.gateway.prefixes import PrefixMemory, block_hashes
from vigil.platform.gateway.router import ReplicaLoad, Router, prefix_key
from vigil.platform.gateway.serving import engine_key
from vigil.platform.gateway.workers import Replica, WorkerRegistry
from vigil.platform.wire.worker import SlotLimits


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one request would run, and the load there: what admission decides on."""

    spec: DeploymentSpec
    version: VersionRef
    key: str  # the engine slot
    replica: Replica
    prompt_ids: list[int]
    max_tokens: int
    load: LoadSnapshot
    block_hashes: list[int]  # of the prompt's full blocks, as that engine caches them
    num_cached_tokens: int  # of the prompt, likely in that engine's prefix cache
    capacity_blocks: int  # KV blocks of that engine
    output: OutputPlan | None = None  # how the output is held and read (generations)


def context_ceiling(workers: WorkerRegistry, version: VersionRef) -> int | None:
    """The longest context any engine of this version offers: it bounds the prompt
    before the engine is known (None: no engine of it reports limits yet)."""
    return max(
        (
            min(r.limits.max_model_len, r.limits.kv_capacity_tokens)
            for key in (engine_key(version), engine_key(version, long_pool=True))
            for replica in workers.serving(key)
            if (r := replica.slots[key]).limits is not None
        ),
        default=None,
    )


def engine_for(
    spec: DeploymentSpec, version: VersionRef, num_prompt_tokens: int
) -> tuple[str, bool]:
    """The version's own engine, or its long-prompt pool's for a prompt that long (True)."""
    pool = spec.long_prompt_pool
    long_pool = pool is not None and num_prompt_tokens >= pool.min_prompt_tokens
    return engine_key(version, long_pool), long_pool


def limits_of(replica: Replica, key: str) -> SlotLimits:
    limits = replica.slots[key].limits
    assert limits is not None, f"{key} is ready on {replica.id} without limits"
    return limits


def replica_load(replica: Replica, key: str, counts: ReplicaCounts) -> ReplicaLoad:
    """What the router weighs for one replica: the gateway's own counts of what it sent
    there, and what the replica last reported."""
    report = replica.slots[key]
    assert report.limits is not None
    stats = report.stats.stats() if report.stats is not None else None
    pending = counts.num_pending_prompt_tokens
    per_token_s = report.costs.token_s if report.costs is not None else None
    return ReplicaLoad(
        replica.id,
        counts.num_in_flight,
        report.limits.max_num_seqs,
        stats.kv_cache_usage if stats else 0.0,
        pending,
        pending * per_token_s if per_token_s is not None else None,
    )


def embedder_load(replica: Replica, counts: ReplicaCounts) -> ReplicaLoad:
    """An embedder reports no batch limits: the router weighs what the gateway has in
    flight there."""
    return ReplicaLoad(replica.id, counts.num_in_flight, 1, 0.0)


class Placer:
    def __init__(self, workers: WorkerRegistry, router: Router, loads: LoadBook) -> None:
        self.workers = workers
        self.router = router
        self.loads = loads
        self.prefixes = PrefixMemory()  # what each engine likely holds in its prefix cache

    def serving(self, key: str) -> list[Replica]:
        """The replicas serving the engine; ServiceUnavailable when there are none."""
        replicas = self.workers.serving(key)
        if not replicas:
            raise self.workers.unavailable(key)
        return replicas

    def choose(self, key: str, replicas: list[Replica], ids: list[int]) -> Replica:
        counts = self.loads.replica_counts(key)
        loads = [replica_load(r, key, counts.get(r.id, ReplicaCounts())) for r in replicas]
        chosen = self.router.choose(key, loads, prefix_key(ids))
        return next(r for r in replicas if r.id == chosen.replica)

    def choose_embedder(self, key: str, replicas: list[Replica]) -> Replica:
        counts = self.loads.replica_counts(key)
        loads = [embedder_load(r, counts.get(r.id, ReplicaCounts())) for r in replicas]
        chosen = self.router.choose(key, loads, None)
        return next(r for r in replicas if r.id == chosen.replica)

    def placement(
        self,
        spec: DeploymentSpec,
        version: VersionRef,
        key: str,
        replica: Replica,
        ids: list[int],
        max_tokens: int,
    ) -> Placement:
        """The load on the chosen replica, and how much of the prompt it likely caches."""
        limits = limits_of(replica, key)
        report = replica.slots[key]
        costs = report.costs.costs() if report.costs is not None else None
        engine_limits = (limits.max_num_seqs, limits.max_num_batched_tokens)
        load = self.loads.snapshot(key, replica.id, engine_limits, costs)
        hashes, cached, capacity = [], 0, 0
        if limits.prefix_caching and limits.block_size:
            hashes = block_hashes(ids, limits.block_size)
            cached = self.prefixes.cached_tokens(
                key, replica.id, hashes, limits.block_size, len(ids)
            )
            capacity = limits.kv_capacity_tokens // limits.block_size
        return Placement(
            spec, version, key, replica, ids, max_tokens, load, hashes, cached, capacity
        )

    def sent(self, place: Placement, replica: Replica) -> None:
        """A prompt sent there: its blocks are the most recently used."""
        self.prefixes.remember(place.key, replica.id, place.block_hashes, place.capacity_blocks)
