"""Alerts fired and resolved, and decisions recorded, each in one transaction with the
webhook messages that report it (the outbox), so that on-call hears of every change
exactly as it was committed, even across a restart."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from vigil.platform.control.alerts.records import AlertRecord, DecisionRecord, fingerprint
from vigil.platform.control.alerts.tables import Alert, Decision
from vigil.platform.control.db import Service, aware, utcnow
from vigil.platform.control.listing import (
    ANY_TIME,
    Page,
    TimeRange,
    check_choice,
    check_limit,
    in_page,
    page_of,
)
from vigil.platform.control.webhooks.outbox import enqueue, subscribers
from vigil.platform.control.webhooks.records import WebhookEvent

MAX_LIST = 1000
# What Vigil decides by itself (decisions.kind).
DECISION_KINDS = ("shed_batch", "fallback", "rollback", "shadow", "alert", "worker")


class AlertService(Service):
    async def fire(
        self, deployment: str, sli: str, severity: str, summary: str, details: dict[str, Any]
    ) -> AlertRecord | None:
        """A new firing alert, unless one for the same condition is firing already."""
        fp = fingerprint(deployment, sli, severity)
        async with self._sessions.begin() as session:
            stmt = select(Alert).where(Alert.fingerprint == fp, Alert.state == "firing")
            if (await session.execute(stmt)).scalars().first() is not None:
                return None
            row = Alert(
                fingerprint=fp,
                deployment=deployment,
                sli=sli,
                severity=severity,
                state="firing",
                summary=summary,
                details=details,
            )
            session.add(row)
            await session.flush()
            record = AlertRecord.of(row)
            session.add(_decision_row(deployment, "alert", "fired", summary, details))
            targets = await subscribers(session, WebhookEvent.SLO_BURN)
            enqueue(session, targets, WebhookEvent.SLO_BURN.value, record.message())
        if targets:
            await self._on_change()  # messages owed: the delivery loop sends them now
        return record

    async def resolve(self, alert_fingerprint: str, details: dict[str, Any]) -> AlertRecord | None:
        """The firing alert of this fingerprint, resolved now (None: none was firing)."""
        async with self._sessions.begin() as session:
            stmt = select(Alert).where(
                Alert.fingerprint == alert_fingerprint, Alert.state == "firing"
            )
            row = (await session.execute(stmt)).scalars().first()
            if row is None:
                return None
            row.state, row.ends_at = "resolved", utcnow()
            row.details = {**row.details, "resolved_with": details}
            record = AlertRecord.of(row)
            reason = f"resolved: {row.summary}"
            session.add(_decision_row(row.deployment, "alert", "resolved", reason, details))
            targets = await subscribers(session, WebhookEvent.SLO_RECOVERED)
            enqueue(session, targets, WebhookEvent.SLO_RECOVERED.value, record.message())
        if targets:
            await self._on_change()
        return record

    async def firing(self) -> list[AlertRecord]:
        return await self.recent(state="firing")

    async def recent(self, state: str | None = None, limit: int = 100) -> list[AlertRecord]:
        """Newest first."""
        stmt = select(Alert).order_by(Alert.id.desc()).limit(min(limit, MAX_LIST))
        if state is not None:
            stmt = stmt.where(Alert.state == state)
        async with self._sessions() as session:
            return [AlertRecord.of(row) for row in (await session.execute(stmt)).scalars()]

    async def decide(
        self,
        deployment: str,
        kind: str,
        decision: str,
        reason: str,
        details: dict[str, Any],
        event: WebhookEvent | None = None,
        ongoing: bool | None = None,
    ) -> DecisionRecord:
        """Record an automatic decision; `event`: the webhooks to tell, with the decision
        as an alert: for a condition of its `kind` that this decision switches on
        (`ongoing` True: firing) or off (False: resolved, one alert with the decision
        before it of the same deployment and kind, which began it); for a one-off
        (None), resolved at once."""
        async with self._sessions.begin() as session:
            began = await _newest(session, deployment, kind) if ongoing is False else None
            row = _decision_row(deployment, kind, decision, reason, details)
            session.add(row)
            await session.flush()
            record = DecisionRecord.of(row)
            targets = await subscribers(session, event) if event is not None else []
            if event is not None:
                starts_at = aware(began.at) if began is not None else None
                enqueue(session, targets, event.value, record.message(ongoing, starts_at))
        if targets:
            await self._on_change()
        return record

    async def latest(self, kinds: Sequence[str]) -> list[DecisionRecord]:
        """The newest decision of each deployment for each of these kinds."""
        newest = (
            select(func.max(Decision.id))
            .where(Decision.kind.in_(kinds))
            .group_by(Decision.deployment, Decision.kind)
        )
        stmt = select(Decision).where(Decision.id.in_(newest)).order_by(Decision.id)
        async with self._sessions() as session:
            return [DecisionRecord.of(row) for row in (await session.execute(stmt)).scalars()]

    async def decisions(
        self,
        deployment: str | None = None,
        kinds: Sequence[str] = (),
        limit: int = 100,
        *,
        span: TimeRange = ANY_TIME,
        before_id: int | None = None,
    ) -> list[DecisionRecord]:
        """Newest first; `before_id`: only decisions older than that one."""
        stmt = select(Decision).order_by(Decision.id.desc()).limit(min(limit, MAX_LIST + 1))
        if deployment is not None:
            stmt = stmt.where(Decision.deployment == deployment)
        if kinds:
            stmt = stmt.where(Decision.kind.in_(kinds))
        stmt = in_page(stmt, Decision.at, Decision.id, span, before_id)
        async with self._sessions() as session:
            return [DecisionRecord.of(row) for row in (await session.execute(stmt)).scalars()]

    async def decisions_page(
        self,
        *,
        deployment: str | None = None,
        kind: str | None = None,
        span: TimeRange = ANY_TIME,
        before_id: int | None = None,
        limit: int = 100,
    ) -> Page[DecisionRecord]:
        check_limit(limit, MAX_LIST)
        check_choice(kind, "kind", DECISION_KINDS)
        found = await self.decisions(
            deployment, (kind,) if kind else (), limit + 1, span=span, before_id=before_id
        )
        return page_of(found, limit, lambda d: d.id)


async def _newest(session: AsyncSession, deployment: str, kind: str) -> Decision | None:
    stmt = (
        select(Decision)
        .where(Decision.deployment == deployment, Decision.kind == kind)
        .order_by(Decision.id.desc())
        .limit(1)
    )
    return (await session.execute(stmt)).scalars().first()


def _decision_row(
    deployment: str, kind: str, decision: str, reason: str, details: dict[str, Any]
) -> Decision:
    return Decision(
        deployment=deployment, kind=kind, decision=decision, reason=reason[:2000], details=details
    )
