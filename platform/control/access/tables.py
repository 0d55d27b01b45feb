"""The users, API keys and console sessions tables. Schema changes go through Alembic
only."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Integer, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from vigil.platform.control.db import Base, utcnow


class User(Base):
    """A person who signs in to the console and the admin API."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(String(200), unique=True)
    password_hash: Mapped[str] = mapped_column(String(200))  # argon2id, encoded
    role: Mapped[str] = mapped_column(String(20))  # viewer | operator | admin
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    disabled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    # Recorded by each console session at sign-in; moving it on signs them all out.
    session_epoch: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


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


class ConsoleSession(Base):
    """A signed-in console session, kept server-side so that every gateway on the
    database knows it and signing out ends it everywhere. Only a hash of the session id
    (the cookie) is stored, as for API keys: reading the table signs nobody in."""

    __tablename__ = "console_sessions"

    key_hash: Mapped[str] = mapped_column(String(64), primary_key=True)  # hex SHA-256
    data: Mapped[bytes] = mapped_column(LargeBinary)  # the session, as the middleware wrote it
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
