"""The webhook outbox: a message owed to each webhook that wants an event, written in the
transaction of the change it reports (so a change and its message commit or roll back
together), and read back by the delivery loop (platform/alerts/delivery.py), which
records every attempt. Nothing is lost on a restart: what was not delivered is still
in the table.

A message's payload is one alert in Alertmanager's shape (`status`, `labels`,
`annotations`, `startsAt`, `endsAt`, `generatorURL`, `fingerprint`); the delivery loop
wraps it for the webhook's format.

Messages of one alert (one fingerprint) go to a webhook one at a time, in the order they
were written: a message is due only once every older one of the same alert and webhook
was delivered or given up. So a resolve never overtakes its firing, however the retries
fall and whichever gateway sends them after a restart. Messages of different alerts, and
test events (no fingerprint), go out independently.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from vigil.platform.control.db import Service, aware, utcnow
from vigil.platform.control.names import must_exist
from vigil.platform.control.webhooks.records import WebhookEvent
from vigil.platform.control.webhooks.repository import WebhookRepository
from vigil.platform.control.webhooks.tables import DeliveryAttempt, OutboxMessage, Webhook

TEST_EVENT = "test"


def enqueue(
    session: AsyncSession, webhooks: Sequence[Webhook], event: str, alert: Mapping[str, Any]
) -> int:
    """Owe `alert` to each of `webhooks`; inside the caller's transaction."""
    for webhook in webhooks:
        session.add(
            OutboxMessage(
                delivery_id=str(uuid.uuid4()),
                webhook_id=webhook.id,
                event=event,
                payload=dict(alert),
                alert_fingerprint=alert["fingerprint"],
            )
        )
    return len(webhooks)


async def subscribers(session: AsyncSession, event: WebhookEvent) -> list[Webhook]:
    rows = await WebhookRepository(session).list()
    return [row for row in rows if row.enabled and event.value in row.events]


@dataclass(frozen=True, slots=True)
class DueMessage:
    """An outbox message to send now, with where and how."""

    id: int
    delivery_id: str
    event: str
    payload: dict[str, Any]
    created_at: datetime
    num_attempts: int
    webhook: str
    url: str
    secret: str
    format: str


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    delivery_id: str
    event: str
    at: datetime
    status_code: int | None
    latency_ms: float
    error: str | None
    delivered: bool  # the message, after this attempt or a later one
    gave_up: bool


class OutboxService(Service):
    async def due(
        self, now: datetime, limit: int, *, busy: Collection[str] = ()
    ) -> list[DueMessage]:
        """Undelivered messages whose next attempt is due and that no older message of
        the same alert to the same webhook still waits before, oldest first; none of
        the `busy` webhooks (the deliverer is sending to them: what it holds stays its
        own, and they do not crowd the others out of `limit`)."""
        earlier = aliased(OutboxMessage)
        waits_behind = (
            select(earlier.id)
            .where(earlier.webhook_id == OutboxMessage.webhook_id)
            .where(earlier.alert_fingerprint == OutboxMessage.alert_fingerprint)
            .where(earlier.id < OutboxMessage.id)
            .where(earlier.delivered_at.is_(None))
            .where(earlier.gave_up_at.is_(None))
            .exists()
        )
        stmt = (
            select(OutboxMessage, Webhook)
            .join(Webhook, OutboxMessage.webhook_id == Webhook.id)
            .where(OutboxMessage.delivered_at.is_(None))
            .where(OutboxMessage.gave_up_at.is_(None))
            .where(OutboxMessage.next_attempt_at <= now)
            .where(~waits_behind)
            .where(Webhook.name.not_in(busy))
            .order_by(OutboxMessage.id)
            .limit(limit)
        )
        async with self._sessions() as session:
            rows = (await session.execute(stmt)).all()
        return [
            DueMessage(
                m.id,
                m.delivery_id,
                m.event,
                m.payload,
                aware(m.created_at),
                m.num_attempts,
                w.name,
                w.url,
                w.secret,
                w.format,
            )
            for m, w in rows
        ]

    async def attempted(
        self,
        message_id: int,
        *,
        status_code: int | None,
        latency_ms: float,
        error: str | None,
        delivered: bool,
        next_attempt_at: datetime | None,
    ) -> None:
        """Record one attempt; not delivered and no next attempt: given up."""
        async with self._sessions.begin() as session:
            message = await session.get(OutboxMessage, message_id)
            if message is None:  # its webhook was deleted meanwhile
                return
            now = utcnow()
            session.add(
                DeliveryAttempt(
                    message_id=message_id,
                    at=now,
                    status_code=status_code,
                    latency_ms=latency_ms,
                    error=error[:2000] if error else None,
                )
            )
            message.num_attempts += 1
            if delivered:
                message.delivered_at = now
            elif next_attempt_at is None:
                message.gave_up_at = now
            else:
                message.next_attempt_at = next_attempt_at

    async def send_test(self, webhook: str) -> str:
        """Owe the webhook a test alert now; its delivery id."""
        async with self._sessions.begin() as session:
            row = must_exist(
                await WebhookRepository(session).get(webhook),
                "webhook",
                webhook,
                param="webhook",
                listing="GET /api/admin/webhooks lists them",
            )
            now = utcnow()
            alert = {
                "status": "firing",
                "labels": {"alertname": "VigilTest", "service": "vigil", "severity": "none"},
                "annotations": {"summary": "A test event sent from Vigil's admin API."},
                "startsAt": now.isoformat(),
                "endsAt": now.isoformat(),
                "generatorURL": "/console/alerts",
                "fingerprint": uuid.uuid4().hex[:16],
            }
            message = OutboxMessage(
                delivery_id=str(uuid.uuid4()), webhook_id=row.id, event=TEST_EVENT, payload=alert
            )
            session.add(message)
        await self._on_change()
        return message.delivery_id

    async def log(self, webhook: str, limit: int = 100) -> list[AttemptRecord]:
        """The webhook's delivery attempts, newest first."""
        stmt = (
            select(DeliveryAttempt, OutboxMessage)
            .join(OutboxMessage, DeliveryAttempt.message_id == OutboxMessage.id)
            .join(Webhook, OutboxMessage.webhook_id == Webhook.id)
            .where(Webhook.name == webhook)
            .order_by(DeliveryAttempt.id.desc())
            .limit(limit)
        )
        async with self._sessions() as session:
            must_exist(
                await WebhookRepository(session).get(webhook),
                "webhook",
                webhook,
                param="webhook",
                listing="GET /api/admin/webhooks lists them",
            )
            rows = (await session.execute(stmt)).all()
        return [
            AttemptRecord(
                m.delivery_id,
                m.event,
                aware(a.at),
                a.status_code,
                a.latency_ms,
                a.error,
                m.delivered_at is not None,
                m.gave_up_at is not None,
            )
            for a, m in rows
        ]
