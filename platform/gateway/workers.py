"""The workers the gateway knows: what each runs, how loaded, whether it is alive.

A worker is up while its heartbeats arrive (at most HEARTBEAT_TIMEOUT_S apart) and it
has not just failed a request; a failed connection makes it a suspect for SUSPECT_S,
so new requests go elsewhere at once instead of after the timeout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from vigil.engine.stats import EngineStats
from vigil.platform.gateway.router import ReplicaLoad
from vigil.platform.worker.protocol import Heartbeat, RegisterRequest, SlotReport, stats_of

HEARTBEAT_TIMEOUT_S = 3.0
SUSPECT_S = 2.0


@dataclass(slots=True)
class Replica:
    id: str
    address: str
    device: str
    memory_bytes: int
    pid: int
    last_heartbeat_ts: float
    slots: dict[str, SlotReport] = field(default_factory=dict)
    suspect_until_ts: float = 0.0
    in_flight: dict[str, int] = field(default_factory=dict)  # by slot key
    pending_prompt: dict[str, int] = field(default_factory=dict)  # tokens, by slot key

    def up(self, now_ts: float) -> bool:
        return (
            now_ts - self.last_heartbeat_ts < HEARTBEAT_TIMEOUT_S
            and now_ts >= self.suspect_until_ts
        )

    def ready(self, slot_key: str) -> SlotReport | None:
        report = self.slots.get(slot_key)
        return report if report is not None and report.state == "ready" else None

    def load(self, slot_key: str) -> ReplicaLoad:
        report = self.slots[slot_key]
        stats = stats_of(report.stats) if report.stats else None
        assert report.limits is not None
        return ReplicaLoad(
            self.id,
            self.in_flight.get(slot_key, 0),
            report.limits.max_num_seqs,
            stats.kv_cache_usage if stats else 0.0,
            self.pending_prompt.get(slot_key, 0),
            report.prefill_tokens_per_s,
        )


class WorkerRegistry:
    def __init__(self) -> None:
        self.replicas: dict[str, Replica] = {}

    def register(self, req: RegisterRequest, now_ts: float | None = None) -> Replica:
        now = time.monotonic() if now_ts is None else now_ts
        old = self.replicas.get(req.worker_id)
        replica = Replica(
            req.worker_id,
            req.address,
            req.device,
            req.memory_bytes,
            req.pid,
            now,
            in_flight=old.in_flight if old else {},
            pending_prompt=old.pending_prompt if old else {},
        )
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
            replica.suspect_until_ts = (time.monotonic() if now_ts is None else now_ts) + SUSPECT_S

    def serving(self, slot_key: str, now_ts: float | None = None) -> list[Replica]:
        """Replicas that are up and have this engine ready."""
        now = time.monotonic() if now_ts is None else now_ts
        return [r for r in self.replicas.values() if r.up(now) and r.ready(slot_key)]

    def slot_states(self, slot_key: str, now_ts: float | None = None) -> list[SlotReport]:
        now = time.monotonic() if now_ts is None else now_ts
        return [
            r.slots[slot_key] for r in self.replicas.values() if r.up(now) and slot_key in r.slots
        ]

    def engine_stats(self, now_ts: float | None = None) -> list[tuple[str, str, EngineStats]]:
        """(engine key, replica, stats) of every engine on a live worker."""
        now = time.monotonic() if now_ts is None else now_ts
        return [
            (key, r.id, stats_of(report.stats))
            for r in self.replicas.values()
            if r.up(now)
            for key, report in r.slots.items()
            if report.stats
        ]
