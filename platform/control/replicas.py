"""Replicas: the engine worker processes, as each last reported itself. A worker
registers when it starts and heartbeats its stats; both are upserts, so a worker that
reports after the control plane lost its row (a fresh database) is simply back.

Heartbeats are operational state, not admin writes: they are not audited."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from vigil.platform.control.tables import Replica, aware, utcnow


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


class ReplicaRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def get(self, replica_id: str) -> Replica | None:
        return await self.session.get(Replica, replica_id)

    async def list(self) -> Sequence[Replica]:
        return (await self.session.execute(select(Replica).order_by(Replica.id))).scalars().all()

    def add(self, row: Replica) -> None:
        self.session.add(row)


class ReplicaService:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def register(self, report: ReplicaReport) -> ReplicaRecord:
        """A (re)started worker: its registration time starts again."""
        return await self._upsert(report, registering=True)

    async def heartbeat(self, report: ReplicaReport) -> ReplicaRecord:
        return await self._upsert(report, registering=False)

    async def mark_down(self, replica_id: str) -> ReplicaRecord | None:
        """None when no replica has that id."""
        async with self._sessions.begin() as session:
            row = await ReplicaRepository(session).get(replica_id)
            if row is None:
                return None
            row.status = ReplicaStatus.DOWN.value
            return _record(row)

    async def mark_silent_down(self, silent_s: float) -> list[str]:
        """Mark down the replicas not heard from in `silent_s`; their ids."""
        cutoff = utcnow() - timedelta(seconds=silent_s)
        async with self._sessions.begin() as session:
            downed = []
            for row in await ReplicaRepository(session).list():
                if row.status != ReplicaStatus.DOWN and aware(row.last_heartbeat_at) < cutoff:
                    row.status = ReplicaStatus.DOWN.value
                    downed.append(row.id)
            return downed

    async def list(self) -> list[ReplicaRecord]:
        async with self._sessions() as session:
            return [_record(row) for row in await ReplicaRepository(session).list()]

    async def _upsert(self, report: ReplicaReport, *, registering: bool) -> ReplicaRecord:
        try:
            return await self._write(report, registering)
        except IntegrityError:  # two first reports of one worker raced; the row exists now
            return await self._write(report, registering)

    async def _write(self, report: ReplicaReport, registering: bool) -> ReplicaRecord:
        now = utcnow()
        async with self._sessions.begin() as session:
            repo = ReplicaRepository(session)
            row = await repo.get(report.id)
            if row is None:
                row = Replica(id=report.id, registered_at=now)
                repo.add(row)
            elif registering:
                row.registered_at = now
            row.address, row.device = report.address, report.device
            row.memory_bytes = report.memory_bytes
            row.status = report.status.value
            row.versions = list(report.versions)
            row.stats = dict(report.stats)
            row.last_heartbeat_at = now
            return _record(row)


def _record(row: Replica) -> ReplicaRecord:
    return ReplicaRecord(
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
