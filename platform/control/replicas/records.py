"""What a worker reports, and what the replicas domain hands out."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from vigil.platform.control.db import aware
from vigil.platform.control.replicas.tables import Replica

# A worker silent this long is forgotten, by the database and by each gateway: the list of
# workers (and vigil_worker_up) holds those that are, or were lately, part of the fleet,
# not every name a rescheduled pod ever had.
FORGET_AFTER_S = 3600.0


class ReplicaStatus(StrEnum):
    UP = "up"
    DOWN = "down"  # missed its heartbeats, or said it stopped
    DRAINING = "draining"  # finishing its requests, taking no new ones


@dataclass(frozen=True, slots=True)
class ReplicaReport:
    """What a worker says about itself at registration and in each heartbeat."""

    id: str
    address: str
    device: str
    memory_bytes: int
    versions: tuple[str, ...] = ()  # model@version keys loaded
    stats: dict[str, Any] = field(default_factory=dict)
    status: ReplicaStatus = ReplicaStatus.UP


@dataclass(frozen=True, slots=True)
class ReplicaRecord:
    id: str
    address: str
    device: str
    memory_bytes: int
    status: ReplicaStatus
    versions: tuple[str, ...]
    stats: dict[str, Any]
    registered_at: datetime
    last_heartbeat_at: datetime

    @classmethod
    def of(cls, row: Replica) -> ReplicaRecord:
        return cls(
            id=row.id,
            address=row.address,
            device=row.device,
            memory_bytes=row.memory_bytes,
            status=ReplicaStatus(row.status),
            versions=tuple(row.versions),
            stats=dict(row.stats),
            registered_at=aware(row.registered_at),
            last_heartbeat_at=aware(row.last_heartbeat_at),
        )
