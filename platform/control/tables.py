"""SQLAlchemy tables of the control plane. Schema changes go through Alembic only."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import DateTime, MetaData, String, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Every constraint gets a predictable name, so migrations can alter it on
# SQLite (batch mode) and PostgreSQL alike.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class ModelVersion(Base):
    """One loadable artifact of a model, e.g. the bundled SmolLM2 GGUF."""

    __tablename__ = "model_versions"
    __table_args__ = (UniqueConstraint("model", "version"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(String(200))
    version: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(20))  # generate | embed
    format: Mapped[str] = mapped_column(String(20))  # gguf | hf
    source: Mapped[str] = mapped_column(String(1000))  # file or folder it loads from
    status: Mapped[str] = mapped_column(String(20))  # registered | loading | ready | failed
    error: Mapped[str | None] = mapped_column(String(2000), default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )
