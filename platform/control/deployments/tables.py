"""The deployments and SLO tables. Schema changes go through Alembic only."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from vigil.platform.control.db import Base, utcnow


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
    # A version that gets a mirrored share of the requests; its answers are discarded.
    shadow_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("model_versions.id"), default=None
    )
    shadow_weight: Mapped[int] = mapped_column(Integer, default=0)  # percent mirrored
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
    window_s: Mapped[float] = mapped_column(Float)  # e.g. 2592000 (30 days)
    auto_rollback: Mapped[bool] = mapped_column(Boolean, default=True)
    rollback_min_requests: Mapped[int] = mapped_column(Integer, default=50)
    rollback_margin: Mapped[float] = mapped_column(Float, default=0.05)
    admission_target: Mapped[float] = mapped_column(Float, default=0.99)  # interactive admitted


class StableHistoryEntry(Base):
    """A stable version a deployment served until a write replaced it (a promotion, an
    edit of `stable`, a roll back), written in the same transaction as that write.

    A roll back without a canary restores the newest entry that is neither a roll back's
    own nor already restored, and marks it `restored_at`: successive roll backs walk back
    through the promotions, and a roll back is never undone by the next one."""

    __tablename__ = "deployment_stable_history"

    id: Mapped[int] = mapped_column(primary_key=True)
    deployment_id: Mapped[int] = mapped_column(
        ForeignKey("deployments.id", ondelete="CASCADE"), index=True
    )
    version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id"))
    revision: Mapped[int] = mapped_column(Integer)  # the deployment's, while it was stable
    action: Mapped[str] = mapped_column(String(100))  # the write that replaced it
    actor: Mapped[str] = mapped_column(String(200))
    replaced_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    restored_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
