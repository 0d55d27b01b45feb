"""The alerts and decisions tables. Schema changes go through Alembic only."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from vigil.platform.control.db import Base, utcnow


class Alert(Base):
    """One episode of an SLO burning too fast: firing from starts_at, resolved at ends_at.
    The fingerprint names the condition (deployment, SLI, severity), so an episode that
    starts again later is a new row with the same fingerprint."""

    __tablename__ = "alerts"
    __table_args__ = (Index("ix_alerts_fingerprint_state", "fingerprint", "state"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(32))
    deployment: Mapped[str] = mapped_column(String(200))
    sli: Mapped[str] = mapped_column(String(40))
    severity: Mapped[str] = mapped_column(String(20))  # page | ticket
    state: Mapped[str] = mapped_column(String(20))  # firing | resolved
    starts_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    ends_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    summary: Mapped[str] = mapped_column(String(2000))
    details: Mapped[dict[str, Any]] = mapped_column(JSON)  # the numbers when it fired


class Decision(Base):
    """Something Vigil decided by itself (shed batch, fall back, roll a canary back, fire
    or resolve an alert), with the numbers that caused it."""

    __tablename__ = "decisions"

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    deployment: Mapped[str] = mapped_column(String(200), index=True)
    kind: Mapped[str] = mapped_column(String(40))  # shed_batch | fallback | rollback | alert
    decision: Mapped[str] = mapped_column(String(40))  # on | off | rolled_back | fired | ...
    reason: Mapped[str] = mapped_column(String(2000))
    details: Mapped[dict[str, Any]] = mapped_column(JSON)
