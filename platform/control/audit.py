"""The audit log: every write to the control plane leaves a row, in the same transaction,
saying who did what to which entity, with JSON snapshots of it before and after.

Snapshots are plain JSON objects of the entity's settings (never a secret or a password
hash); `before` is absent for a creation and `after` for a deletion.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from vigil.platform.control.tables import AuditEntry, aware
from vigil.platform.errors import InvalidRequest

# Awaited after every committed admin write (the gateway reloads its serving view).
OnChange = Callable[[], Awaitable[None]]

MAX_LIMIT = 1000
Snapshot = Mapping[str, Any]


async def nothing_changed() -> None:
    """An OnChange for services used without listeners (the CLI)."""


@dataclass(frozen=True, slots=True)
class AuditRecord:
    id: int
    at: datetime
    actor: str
    action: str  # <entity_type>.<verb>, e.g. deployment.promote
    entity_type: str
    entity_name: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None


def to_json(snapshot: Snapshot | None) -> str | None:
    if snapshot is None:
        return None
    return json.dumps(snapshot, sort_keys=True, separators=(",", ":"), default=str)


class AuditRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    def add(
        self,
        actor: str,
        action: str,
        entity_type: str,
        entity_name: str,
        before: Snapshot | None,
        after: Snapshot | None,
    ) -> None:
        assert actor, "every audited write names its actor"
        self.session.add(
            AuditEntry(
                actor=actor,
                action=action,
                entity_type=entity_type,
                entity_name=entity_name,
                before=to_json(before),
                after=to_json(after),
            )
        )

    async def list(
        self, entity_type: str | None, entity_name: str | None, limit: int
    ) -> Sequence[AuditEntry]:
        stmt = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)
        if entity_type is not None:
            stmt = stmt.where(AuditEntry.entity_type == entity_type)
        if entity_name is not None:
            stmt = stmt.where(AuditEntry.entity_name == entity_name)
        return (await self.session.execute(stmt)).scalars().all()


class AuditService:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def list(
        self,
        entity_type: str | None = None,
        entity_name: str | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        """Newest first (ids grow with time)."""
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidRequest(
                f"limit must be between 1 and {MAX_LIMIT}, got {limit}", param="limit"
            )
        async with self._sessions() as session:
            rows = await AuditRepository(session).list(entity_type, entity_name, limit)
            return [_record(row) for row in rows]


def _record(row: AuditEntry) -> AuditRecord:
    return AuditRecord(
        id=row.id,
        at=aware(row.at),
        actor=row.actor,
        action=row.action,
        entity_type=row.entity_type,
        entity_name=row.entity_name,
        before=json.loads(row.before) if row.before is not None else None,
        after=json.loads(row.after) if row.after is not None else None,
    )
