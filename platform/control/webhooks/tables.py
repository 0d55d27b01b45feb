"""The webhooks table. Schema changes go through Alembic only."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from vigil.platform.control.db import Base, utcnow


class Webhook(Base):
    """Where alerts go. The secret signs each delivery, so it is stored as given."""

    __tablename__ = "webhooks"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    url: Mapped[str] = mapped_column(String(2000))
    secret: Mapped[str] = mapped_column(String(200))
    events: Mapped[list[str]] = mapped_column(JSON)  # e.g. ["slo.burn", "shed"]
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    # alertmanager_webhook: Alertmanager's webhook payload (version 4) POSTed to url;
    # alertmanager_api: the alerts POSTed to an Alertmanager's /api/v2/alerts at url.
    format: Mapped[str] = mapped_column(String(40), default="alertmanager_webhook")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class OutboxMessage(Base):
    """A message owed to one webhook, written in the same transaction as the change it
    reports, and sent by the delivery loop until delivered or too old. Its delivery_id
    stays the same across retries, so a receiver can drop duplicates. alert_fingerprint
    names the alert it reports: a webhook gets one alert's messages in the order written
    (None, for a test event: in no particular order)."""

    __tablename__ = "webhook_outbox"
    __table_args__ = (
        Index("ix_webhook_outbox_pending", "delivered_at", "next_attempt_at"),
        Index("ix_webhook_outbox_alert", "webhook_id", "alert_fingerprint"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    delivery_id: Mapped[str] = mapped_column(String(36), unique=True)
    webhook_id: Mapped[int] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"))
    event: Mapped[str] = mapped_column(String(40))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    alert_fingerprint: Mapped[str | None] = mapped_column(String(32), default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    num_attempts: Mapped[int] = mapped_column(Integer, default=0)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    gave_up_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)


class DeliveryAttempt(Base):
    """One try at sending an outbox message: the delivery log."""

    __tablename__ = "webhook_attempts"

    id: Mapped[int] = mapped_column(primary_key=True)
    message_id: Mapped[int] = mapped_column(
        ForeignKey("webhook_outbox.id", ondelete="CASCADE"), index=True
    )
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    latency_ms: Mapped[float] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(String(2000), default=None)
