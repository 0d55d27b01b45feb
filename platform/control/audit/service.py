"""Reading the audit log, and recording what happened outside any domain write (the
writes themselves log their entries in their own transaction)."""

from __future__ import annotations

from vigil.platform.control.audit.records import AuditRecord, Snapshot
from vigil.platform.control.audit.repository import AuditRepository
from vigil.platform.control.db import Service
from vigil.platform.control.listing import (
    ANY_TIME,
    Page,
    TimeRange,
    check_choice,
    check_limit,
    page_of,
)
from vigil.platform.errors import InvalidRequest

MAX_LIMIT = 1000
# Users and API keys are an admin's to read, and so are the entries about them (the
# admin API and the console hide them from other roles alike).
ADMIN_ONLY_ENTITIES = frozenset({"user", "key"})
# What the entries are about (audit_log.entity_type).
ENTITY_TYPES = frozenset({"deployment", "version", "model", "webhook", "user", "key"})


class AuditService(Service):
    async def list(
        self,
        entity_type: str | None = None,
        entity_name: str | None = None,
        limit: int = 100,
        hidden_types: frozenset[str] = frozenset(),
        actor: str | None = None,
    ) -> list[AuditRecord]:
        """Newest first (ids grow with time), without entries about `hidden_types` (the
        records a reader's role may not see)."""
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidRequest(
                f"limit must be between 1 and {MAX_LIMIT}, got {limit}", param="limit"
            )
        async with self._sessions() as session:
            rows = await AuditRepository(session).newest(
                entity_type, entity_name, limit, hidden_types, actor
            )
            return [AuditRecord.of(row) for row in rows]

    async def page(
        self,
        *,
        entity_type: str | None = None,
        entity_name: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        span: TimeRange = ANY_TIME,
        before_id: int | None = None,
        limit: int = 100,
        hidden_types: frozenset[str] = frozenset(),
    ) -> Page[AuditRecord]:
        """One page, newest first, of the entries that match every filter given."""
        check_limit(limit, MAX_LIMIT)
        check_choice(entity_type, "entity_type", sorted(ENTITY_TYPES))  # hidden ones: none
        async with self._sessions() as session:
            rows = await AuditRepository(session).newest(
                entity_type,
                entity_name,
                limit + 1,
                hidden_types,
                actor,
                action=action,
                span=span,
                before_id=before_id,
            )
            return page_of([AuditRecord.of(row) for row in rows], limit, lambda e: e.id)

    async def record(
        self, actor: str, action: str, entity_type: str, entity_name: str, details: Snapshot
    ) -> None:
        async with self._sessions.begin() as session:
            AuditRepository(session).log(actor, action, entity_type, entity_name, None, details)
