"""SQLAlchemy tables of the control plane. Schema changes go through Alembic only."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import DateTime, Integer, MetaData, String, UniqueConstraint
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


class ApiKey(Base):
    """A key for the OpenAI-compatible API. Only a hash of the key is stored: the
    plaintext is shown once, when the key is created."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    # Names stay taken after a revoke, so a name in old logs means one key.
    name: Mapped[str] = mapped_column(String(200), unique=True)
    key_prefix: Mapped[str] = mapped_column(String(16))  # tells keys apart in listings
    # Hex SHA-256 of the whole key. Keys are 256 random bits, so a fast unsalted hash
    # is safe here (no dictionary to try) and lets a request find its key by index.
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    priority: Mapped[str] = mapped_column(String(20))  # interactive | batch
    models: Mapped[str | None] = mapped_column(String(2000), default=None)  # NULL: all
    rate_limit_per_minute: Mapped[int | None] = mapped_column(Integer, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
