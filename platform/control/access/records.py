"""Roles, and what the access domain hands out about users and keys (never a password
hash, never a key)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from vigil.engine.request import Priority
from vigil.platform.control.access.tables import ApiKey, User
from vigil.platform.control.db import aware


class Role(StrEnum):
    VIEWER = "viewer"  # reads everything but users and keys
    OPERATOR = "operator"  # also changes models, deployments, SLOs, webhooks
    ADMIN = "admin"  # also manages users and API keys


_RANK = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


@dataclass(frozen=True, slots=True)
class UserRecord:
    username: str
    role: Role
    created_at: datetime
    disabled_at: datetime | None
    session_epoch: int  # a console session of another epoch is signed out

    @property
    def disabled(self) -> bool:
        return self.disabled_at is not None

    def may(self, needed: Role) -> bool:
        """Each role may do what the roles below it may."""
        return _RANK[self.role] >= _RANK[needed]

    @classmethod
    def of(cls, row: User) -> UserRecord:
        return cls(
            username=row.username,
            role=Role(row.role),
            created_at=aware(row.created_at),
            disabled_at=aware(row.disabled_at) if row.disabled_at is not None else None,
            session_epoch=row.session_epoch,
        )


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    id: int
    name: str
    key_prefix: str
    priority: Priority
    models: frozenset[str] | None  # deployments the key may use; None: all
    rate_limit_per_minute: int | None  # None: no limit
    created_at: datetime
    revoked_at: datetime | None

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    @classmethod
    def of(cls, row: ApiKey) -> ApiKeyRecord:
        priority = Priority.from_label(row.priority)
        assert priority is not None, f"key {row.name!r} has an unknown class {row.priority!r}"
        return cls(
            id=row.id,
            name=row.name,
            key_prefix=row.key_prefix,
            priority=priority,
            models=frozenset(row.models.split(",")) if row.models is not None else None,
            rate_limit_per_minute=row.rate_limit_per_minute,
            created_at=aware(row.created_at),
            revoked_at=aware(row.revoked_at) if row.revoked_at is not None else None,
        )
