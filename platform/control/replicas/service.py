"""Recording what workers report: registrations, heartbeats, and silence."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, delete, update
from sqlalchemy.exc import IntegrityError

from vigil.platform.control.db import Service, aware, utcnow
from vigil.platform.control.replicas.records import (
    FORGET_AFTER_S,
    ReplicaRecord,
    ReplicaReport,
    ReplicaStatus,
)
from vigil.platform.control.replicas.repository import ReplicaRepository
from vigil.platform.control.replicas.tables import Replica


class ReplicaService(Service):
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
            return ReplicaRecord.of(row)

    async def mark_silent_down(self, silent_s: float) -> list[ReplicaRecord]:
        """Mark down the replicas not heard from in `silent_s`, and forget those down for
        FORGET_AFTER_S. Returns the ones this call marked down, as last reported (a
        DRAINING one left on purpose): when several gateways sweep at once, each row
        goes to one of them."""
        now = utcnow()
        cutoff = now - timedelta(seconds=silent_s)
        async with self._sessions.begin() as session:
            rows = await ReplicaRepository(session).list()
            silent = [
                ReplicaRecord.of(row)
                for row in rows
                if row.status != ReplicaStatus.DOWN and aware(row.last_heartbeat_at) < cutoff
            ]
            forgotten = [
                row.id
                for row in rows
                if row.status == ReplicaStatus.DOWN
                and aware(row.last_heartbeat_at) < now - timedelta(seconds=FORGET_AFTER_S)
            ]
        downed = []
        for record in silent:
            async with self._sessions.begin() as session:
                stmt = (
                    update(Replica)
                    .where(Replica.id == record.id, Replica.status == record.status.value)
                    .where(Replica.last_heartbeat_at < cutoff)  # no heartbeat since
                    .values(status=ReplicaStatus.DOWN.value)
                )
                result = await session.execute(stmt)
                if cast(CursorResult[Any], result).rowcount == 1:
                    downed.append(record)
        if forgotten:
            async with self._sessions.begin() as session:
                gone = delete(Replica).where(
                    Replica.id.in_(forgotten), Replica.status == ReplicaStatus.DOWN.value
                )
                await session.execute(gone)
        return downed

    async def list(self) -> list[ReplicaRecord]:
        async with self._sessions() as session:
            return [ReplicaRecord.of(row) for row in await ReplicaRepository(session).list()]

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
            return ReplicaRecord.of(row)
