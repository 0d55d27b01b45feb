"""SQLAlchemy tables of the control plane. Schema changes go through Alembic only."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
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


def aware(ts: datetime) -> datetime:
    """SQLite hands back naive datetimes; every timestamp Vigil writes is UTC."""
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Model(Base):
    """A model family (e.g. SmolLM2-135M-Instruct); its versions are loadable artifacts."""

    __tablename__ = "models"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    kind: Mapped[str] = mapped_column(String(20))  # generate | embed
    description: Mapped[str | None] = mapped_column(String(2000), default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ModelVersion(Base):
    """One loadable artifact of a model, e.g. the bundled SmolLM2 GGUF.

    `artifact` is what was registered ("bundled:<name>", a GGUF file or a Hugging Face
    folder) and never changes; `source` is where a worker last loaded it from (for a
    bundled model, the file inside its package on that host). `model` repeats the
    model's name (the unique key, and what the console shows).
    """

    __tablename__ = "model_versions"
    __table_args__ = (UniqueConstraint("model", "version"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    model: Mapped[str] = mapped_column(String(200))
    version: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(20))  # generate | embed
    format: Mapped[str] = mapped_column(String(20))  # gguf | hf
    artifact: Mapped[str] = mapped_column(String(1000))
    checksum: Mapped[str | None] = mapped_column(String(64), default=None)  # hex SHA-256
    # dtype and sampling defaults (temperature, top_p, top_k): a JSON object
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    source: Mapped[str] = mapped_column(String(1000))  # file or folder it loads from
    # registered | loading | ready | failed | retired
    status: Mapped[str] = mapped_column(String(20))
    error: Mapped[str | None] = mapped_column(String(2000), default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )


class Deployment(Base):
    """The name clients send as `model`: a stable version, an optional canary with a share
    of the traffic, and the limits that protect it. `revision` counts the writes: the ORM
    adds `WHERE revision = <read>` to every UPDATE, so a write based on a stale read
    fails instead of undoing someone else's change (optimistic concurrency)."""

    __tablename__ = "deployments"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    stable_version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id"))
    canary_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("model_versions.id"), default=None
    )
    canary_weight: Mapped[int] = mapped_column(Integer, default=0)  # percent, 0-100
    max_prompt_tokens: Mapped[int | None] = mapped_column(Integer, default=None)
    max_tokens: Mapped[int | None] = mapped_column(Integer, default=None)
    # {"interactive": {"max_queue", "max_queue_wait_s"}, "batch": {...}}
    limits: Mapped[dict[str, Any]] = mapped_column(JSON)
    fallback_deployment: Mapped[str | None] = mapped_column(String(200), default=None)
    fallback_trigger: Mapped[str | None] = mapped_column(String(20), default=None)
    fallback_threshold_s: Mapped[float | None] = mapped_column(Float, default=None)
    long_prompt_min_tokens: Mapped[int | None] = mapped_column(Integer, default=None)
    long_prompt_max_queue: Mapped[int | None] = mapped_column(Integer, default=None)
    long_prompt_max_num_seqs: Mapped[int | None] = mapped_column(Integer, default=None)
    revision: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )

    __mapper_args__ = {"version_id_col": revision}  # noqa: RUF012


class SLO(Base):
    """A deployment's service-level objectives (one row per deployment)."""

    __tablename__ = "slos"

    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id"), primary_key=True)
    ttft_p99_s: Mapped[float] = mapped_column(Float)
    min_tokens_per_s: Mapped[float] = mapped_column(Float)
    batch_shed_fraction: Mapped[float] = mapped_column(Float)
    availability_target: Mapped[float] = mapped_column(Float)  # e.g. 0.999
    window_s: Mapped[float] = mapped_column(Float)  # e.g. 3600


class Webhook(Base):
    """Where alerts go. The secret signs each delivery, so it is stored as given."""

    __tablename__ = "webhooks"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    url: Mapped[str] = mapped_column(String(2000))
    secret: Mapped[str] = mapped_column(String(200))
    events: Mapped[list[str]] = mapped_column(JSON)  # e.g. ["slo.burn", "shed"]
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class User(Base):
    """A person who signs in to the console and the admin API."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(String(200), unique=True)
    password_hash: Mapped[str] = mapped_column(String(200))  # argon2id, encoded
    role: Mapped[str] = mapped_column(String(20))  # viewer | operator | admin
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    disabled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)


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
