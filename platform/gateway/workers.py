"""The workers the gateway knows: what each runs, what it reports, whether it is alive.

A worker is up while its heartbeats arrive (at most HEARTBEAT_TIMEOUT_S apart) and none
of its requests has failed since the last one: a failed connection takes it out at once
(new requests go elsewhere, /readyz says so) until its next heartbeat proves it alive.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from vigil.engine.stats import EngineStats
from vigil.platform.control.replicas.records import FORGET_AFTER_S
from vigil.platform.errors import ServiceUnavailable
from vigil.platform.wire.worker import Heartbeat, RegisterRequest, SlotReport

# Workers beat every second: two beats missed and half the next, and a worker is given
# up, so that the traffic of one that drops off the network moves within 3 s.
HEARTBEAT_TIMEOUT_S = 2.5


@dataclass(slots=True)
class Replica:
    id: str
    address: str
    device: str
    memory_bytes: int
    pid: int
    last_heartbeat_ts: float
    slots: dict[str, SlotReport] = field(default_factory=dict)
    failed_ts: float = float("-inf")  # its last failed request

    def up(self, now_ts: float) -> bool:
        return (
            now_ts - self.last_heartbeat_ts < HEARTBEAT_TIMEOUT_S
            and self.last_heartbeat_ts > self.failed_ts
        )

    def drained(self, now_ts: float) -> bool:
        """It left on purpose: its last heartbeat said every engine was draining (a
        SIGTERM, as a scale-down or a rollout sends), and none came since."""
        return (
            not self.up(now_ts)
            and bool(self.slots)
            and all(s.state == "draining" for s in self.slots.values())
        )

    def ready(self, slot_key: str) -> SlotReport | None:
        report = self.slots.get(slot_key)
        return report if report is not None and report.state == "ready" else None


class WorkerRegistry:
    def __init__(self) -> None:
        self.replicas: dict[str, Replica] = {}

    def register(self, req: RegisterRequest, now_ts: float | None = None) -> Replica:
        now = time.monotonic() if now_ts is None else now_ts
        replica = Replica(req.worker_id, req.address, req.device, req.memory_bytes, req.pid, now)
        self.replicas[req.worker_id] = replica
        return replica

    def heartbeat(self, worker_id: str, beat: Heartbeat, now_ts: float | None = None) -> bool:
        """False for a worker this gateway does not know (it must register again)."""
        replica = self.replicas.get(worker_id)
        if replica is None:
            return False
        replica.last_heartbeat_ts = time.monotonic() if now_ts is None else now_ts
        replica.slots = {s.key: s for s in beat.slots}
        return True

    def mark_failed(self, worker_id: str, now_ts: float | None = None) -> None:
        replica = self.replicas.get(worker_id)
        if replica is not None:
            replica.failed_ts = time.monotonic() if now_ts is None else now_ts

    def serving(self, slot_key: str, now_ts: float | None = None) -> list[Replica]:
        """Replicas that are up and have this engine ready."""
        now = time.monotonic() if now_ts is None else now_ts
        return [r for r in self.replicas.values() if r.up(now) and r.ready(slot_key)]

    def unavailable(self, slot_key: str) -> ServiceUnavailable:
        """Why no live worker has this engine ready: it failed to load on every one that
        tried, or it is still loading (then retry shortly)."""
        reports = self.slot_states(slot_key)
        failed = [r for r in reports if r.state == "failed"]
        if reports and len(failed) == len(reports):
            return ServiceUnavailable(
                f"The model version '{slot_key}' failed to load: {failed[0].error}",
                code="model_failed",
            )
        return ServiceUnavailable(
            f"The model version '{slot_key}' is not ready on any worker yet; retry shortly.",
            code="model_loading",
            retry_after_s=5,
        )

    def slot_states(self, slot_key: str, now_ts: float | None = None) -> list[SlotReport]:
        now = time.monotonic() if now_ts is None else now_ts
        return [
            r.slots[slot_key] for r in self.replicas.values() if r.up(now) and slot_key in r.slots
        ]

    def liveness(self, now_ts: float | None = None) -> list[tuple[str, bool, float]]:
        """(replica, up, seconds since its last heartbeat) of every worker known, but
        those that drained away: `vigil_worker_up == 0` alerts on a worker lost, not on
        one a scale-down or a rollout stopped. One silent for FORGET_AFTER_S is dropped."""
        now = time.monotonic() if now_ts is None else now_ts
        for gone in [
            r.id for r in self.replicas.values() if now - r.last_heartbeat_ts > FORGET_AFTER_S
        ]:
            del self.replicas[gone]
        return [
            (r.id, r.up(now), now - r.last_heartbeat_ts)
            for r in self.replicas.values()
            if not r.drained(now)
        ]

    def engine_stats(self, now_ts: float | None = None) -> list[tuple[str, str, EngineStats]]:
        """(engine key, replica, stats) of every engine on a live worker."""
        now = time.monotonic() if now_ts is None else now_ts
        return [
            (key, r.id, report.stats.stats())
            for r in self.replicas.values()
            if r.up(now)
            for key, report in r.slots.items()
            if report.stats
        ]
