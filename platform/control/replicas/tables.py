"""The replicas table. Schema changes go through Alembic only."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, String
from sqlalchemy.orm import Mapped, mapped_column

from vigil.platform.control.db import Base, utcnow


class Replica(Base):
    """An engine worker process, as it last reported itself."""

    __tablename__ = "replicas"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # the worker id
    address: Mapped[str] = mapped_column(String(500))
    device: Mapped[str] = mapped_column(String(100))
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(20))  # up | down | draining
    versions: Mapped[list[str]] = mapped_column(JSON)  # model@version keys loaded
    stats: Mapped[dict[str, Any]] = mapped_column(JSON)
    registered_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
