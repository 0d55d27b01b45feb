"""The models and model versions tables. Schema changes go through Alembic only."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from vigil.platform.control.db import Base, utcnow


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
