"""The audit log's SQL: entries are added inside the writer's transaction, so a write
and its entry commit (or roll back) together."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select

from vigil.platform.control.audit.records import Snapshot, to_json
from vigil.platform.control.audit.tables import AuditEntry
from vigil.platform.control.db import Repository
from vigil.platform.control.listing import ANY_TIME, TimeRange, in_page


class AuditRepository(Repository[AuditEntry]):
    def log(
        self,
        actor: str,
        action: str,
        entity_type: str,
        entity_name: str,
        before: Snapshot | None,
        after: Snapshot | None,
    ) -> None:
        assert actor, "every audited write names its actor"
        self.add(
            AuditEntry(
                actor=actor,
                action=action,
                entity_type=entity_type,
                entity_name=entity_name,
                before=to_json(before),
                after=to_json(after),
            )
        )

    async def newest(
        self,
        entity_type: str | None,
        entity_name: str | None,
        limit: int,
        hidden_types: frozenset[str] = frozenset(),
        actor: str | None = None,
        *,
        action: str | None = None,
        span: TimeRange = ANY_TIME,
        before_id: int | None = None,
    ) -> Sequence[AuditEntry]:
        """Newest first; `before_id`: only entries older than that one (the next page)."""
        stmt = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)
        if hidden_types:
            stmt = stmt.where(AuditEntry.entity_type.not_in(hidden_types))
        if entity_type is not None:
            stmt = stmt.where(AuditEntry.entity_type == entity_type)
        if entity_name is not None:
            stmt = stmt.where(AuditEntry.entity_name == entity_name)
        if actor is not None:
            stmt = stmt.where(AuditEntry.actor == actor)
        if action is not None:
            stmt = stmt.where(AuditEntry.action == action)
        stmt = in_page(stmt, AuditEntry.at, AuditEntry.id, span, before_id)
        return (await self.session.execute(stmt)).scalars().all()
