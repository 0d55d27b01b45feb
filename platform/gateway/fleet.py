"""The fleet as the control plane keeps it: each replica's row (at registration, then
every few seconds), each version's state (ready on some worker, failed on all), and a
deployment whose stable version failed everywhere kept on the version before it; and
the fleet's engines as telemetry reads them."""

from __future__ import annotations

import logging
import time

import msgspec

from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.replicas.records import ReplicaReport
from vigil.platform.control.specs import DeploymentSpec, VersionRef
from vigil.platform.control.versions.records import VersionStatus
from vigil.platform.gateway.readiness import VersionState, version_error, version_states
from vigil.platform.gateway.serving import ServingView, version_key
from vigil.platform.gateway.tokenizers import TokenizerCache
from vigil.platform.gateway.workers import WorkerRegistry
from vigil.platform.telemetry.metrics import EngineSnapshot

log = logging.getLogger(__name__)

REPLICA_WRITE_S = 5.0
_STATUS = {
    "loading": VersionStatus.LOADING,
    "ready": VersionStatus.READY,
    "failed": VersionStatus.FAILED,
}


def engine_snapshots(workers: WorkerRegistry) -> list[EngineSnapshot]:
    """Every engine on a live worker: its latest stats, and the version it runs."""
    return [
        EngineSnapshot(key, version_key(key), replica, stats)
        for key, replica, stats in workers.engine_stats()
    ]


class FleetBook:
    def __init__(
        self,
        workers: WorkerRegistry,
        view: ServingView,
        tokenizers: TokenizerCache,
        plane: ControlPlane,
    ) -> None:
        self.workers = workers
        self.view = view
        self.tokenizers = tokenizers
        self.plane = plane
        self._recorded: dict[str, str] = {}  # version key -> state in db
        self._kept_from: set[str] = set()  # failed stables served around
        self._replica_writes: dict[str, float] = {}  # id -> last db write

    async def record_replica(self, worker_id: str, registering: bool = False) -> None:
        """Keep the replicas table current: at registration, then every few seconds."""
        replica = self.workers.replicas.get(worker_id)
        now = time.monotonic()
        if replica is None or (
            not registering and now - self._replica_writes.get(worker_id, 0.0) < REPLICA_WRITE_S
        ):
            return
        self._replica_writes[worker_id] = now
        report = ReplicaReport(
            id=replica.id,
            address=replica.address,
            device=replica.device,
            memory_bytes=replica.memory_bytes,
            versions=tuple(k for k, r in replica.slots.items() if r.state == "ready"),
            stats={k: msgspec.to_builtins(r.stats) for k, r in replica.slots.items() if r.stats},
        )
        try:
            if registering:
                await self.plane.replicas.register(report)
            else:
                await self.plane.replicas.heartbeat(report)
        except Exception:  # serving goes on when the database is unreachable
            log.exception("could not record replica %s", worker_id)

    async def on_workers_changed(self) -> None:
        """Record version states that changed (ready on some worker, failed on all), and
        keep a deployment whose stable version failed everywhere on the one before it."""
        states = version_states(self.view, self.tokenizers)
        for version in self.view.versions_in_use():
            state = states.get(version.key, "loading")
            if self._recorded.get(version.key) != state:
                self._recorded[version.key] = state
                await self._record(version, state)
        for spec in list(self.view.deployments.values()):
            serving = self.view.serving(spec)
            if serving == spec.stable and states.get(serving.key) is VersionState.FAILED:
                await self._serve_previous(spec)

    async def _serve_previous(self, spec: DeploymentSpec) -> None:
        """A stable version that loads nowhere (its file gone, say, after a restart) would
        leave the deployment answering 503: the version it replaced serves instead, once
        loaded, until an operator acts. Tried once per failed version."""
        if spec.stable.key in self._kept_from:
            return
        self._kept_from.add(spec.stable.key)
        try:
            previous = await self.plane.deployments.previous_stable(spec.name)
        except Exception:  # serving goes on when the database is unreachable
            log.exception("could not read the history of %s", spec.name)
            return
        if previous is None:
            log.error("%s: stable version %s failed to load everywhere", spec.name, spec.stable.key)
            return
        log.error(
            "%s: stable version %s failed to load everywhere (%s); serving %s, the version "
            "it replaced, until an operator acts",
            spec.name,
            spec.stable.key,
            version_error(self.view, self.tokenizers, spec.stable.key),
            previous.key,
        )
        self.view.serve_instead(spec.name, previous)

    async def _record(self, version: VersionRef, state: str) -> None:
        error = version_error(self.view, self.tokenizers, version.key)
        try:
            await self.plane.versions.record(
                model=version.model,
                version=version.version,
                kind=version.kind.value,
                format=version.format.value,
                source=version.artifact,
                status=_STATUS[state],
                error=error,
            )
        except Exception:  # serving goes on when the database is unreachable
            log.exception("could not record the state of %s", version.key)
