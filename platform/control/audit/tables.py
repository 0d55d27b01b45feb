"""The audit log's table. Schema changes go through Alembic only."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from vigil.platform.control.db import Base, utcnow


class AuditEntry(Base):
    """Who changed what, with JSON snapshots of the entity before and after."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_entity", "entity_type", "entity_name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    actor: Mapped[str] = mapped_column(String(200))  # a username, or cli | config | system
    action: Mapped[str] = mapped_column(String(100))  # e.g. deployment.promote
    entity_type: Mapped[str] = mapped_column(String(50))  # e.g. deployment
    entity_name: Mapped[str] = mapped_column(String(400))  # e.g. chat, smollm2@v2
    before: Mapped[str | None] = mapped_column(Text, default=None)  # JSON; NULL: created
    after: Mapped[str | None] = mapped_column(Text, default=None)  # JSON; NULL: deleted
