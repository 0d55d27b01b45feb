"""API keys: the repository holds the SQL, the service the rules.

A key is `vgl_` + 256 random bits. The plaintext leaves `create` once and is never
stored or logged; the database keeps its SHA-256, which is also how a request finds it.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from vigil.engine.request import Priority
from vigil.platform.control.audit import AuditRepository
from vigil.platform.control.tables import ApiKey, utcnow

log = logging.getLogger(__name__)

KEY_PREFIX = "vgl_"
NUM_PREFIX_CHARS = 12  # "vgl_" and 8 random characters: enough to tell keys apart
MAX_NAME_CHARS = 200
MAX_MODELS_CHARS = 2000

# How a priority class is spelled in the database, the CLI and the x-vigil-priority header.
PRIORITY_NAMES: dict[str, Priority] = {p.name.lower(): p for p in Priority}


class ApiKeyError(ValueError):
    """An operator's request about keys cannot be done; the message says why."""


class ApiKeyNotFound(ApiKeyError):
    pass


class ApiKeyConflict(ApiKeyError):
    """The name is taken, or the key is already revoked."""


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


def hash_key(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


class ApiKeyRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def by_name(self, name: str) -> ApiKey | None:
        stmt = select(ApiKey).where(ApiKey.name == name)
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def by_hash(self, key_hash: str) -> ApiKey | None:
        stmt = select(ApiKey).where(ApiKey.key_hash == key_hash)
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def list(self) -> Sequence[ApiKey]:
        stmt = select(ApiKey).order_by(ApiKey.name)
        return (await self.session.execute(stmt)).scalars().all()

    def add(self, row: ApiKey) -> None:
        self.session.add(row)


class ApiKeyService:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def create(
        self,
        name: str,
        priority: Priority = Priority.INTERACTIVE,
        models: Sequence[str] | None = None,
        rate_limit_per_minute: int | None = None,
        *,
        actor: str = "cli",
    ) -> tuple[ApiKeyRecord, str]:
        """A new key: its record and its plaintext, which is not kept anywhere. Audited
        as done by `actor`."""
        name = _check_name(name)
        models_text = _join_models(models)
        if rate_limit_per_minute is not None and rate_limit_per_minute < 1:
            raise ApiKeyError(
                f"a rate limit must be at least 1 request per minute, got "
                f"{rate_limit_per_minute}; leave it out for no limit"
            )
        plaintext = new_key()
        row = ApiKey(
            name=name,
            key_prefix=plaintext[:NUM_PREFIX_CHARS],
            key_hash=hash_key(plaintext),
            priority=priority.name.lower(),
            models=models_text,
            rate_limit_per_minute=rate_limit_per_minute,
        )
        try:
            async with self._sessions.begin() as session:
                repo = ApiKeyRepository(session)
                if await repo.by_name(name) is not None:
                    raise _duplicate(name)
                repo.add(row)
                await session.flush()  # assigns the id and created_at
                record = _record(row)
                AuditRepository(session).add(
                    actor, "key.create", "key", name, None, _snapshot(record)
                )
        except IntegrityError:  # another process took the name in between
            raise _duplicate(name) from None
        log.info("created API key %r (%s)", name, record.key_prefix)
        return record, plaintext

    async def list(self) -> list[ApiKeyRecord]:
        async with self._sessions() as session:
            return [_record(row) for row in await ApiKeyRepository(session).list()]

    async def revoke(self, name: str, *, actor: str = "cli") -> ApiKeyRecord:
        async with self._sessions.begin() as session:
            row = await ApiKeyRepository(session).by_name(name)
            if row is None:
                raise ApiKeyNotFound(f"no API key is named {name!r}; `vigil keys list` shows them")
            if row.revoked_at is not None:
                raise ApiKeyConflict(
                    f"the API key {name!r} was already revoked at {_aware(row.revoked_at)}"
                )
            before = _snapshot(_record(row))
            row.revoked_at = utcnow()
            record = _record(row)
            AuditRepository(session).add(
                actor, "key.revoke", "key", name, before, _snapshot(record)
            )
        log.info("revoked API key %r (%s)", name, record.key_prefix)
        return record

    async def find(self, plaintext: str) -> ApiKeyRecord | None:
        """The key's record, or None when it is unknown or revoked."""
        async with self._sessions() as session:
            row = await ApiKeyRepository(session).by_hash(hash_key(plaintext))
            return None if row is None or row.revoked_at is not None else _record(row)


def _check_name(name: str) -> str:
    name = name.strip()
    if not name:
        raise ApiKeyError("an API key needs a name (who or what uses it)")
    if len(name) > MAX_NAME_CHARS:
        raise ApiKeyError(f"an API key's name has at most {MAX_NAME_CHARS} characters")
    return name


def _join_models(models: Sequence[str] | None) -> str | None:
    """The allowed deployments as stored: comma-separated, sorted; None means all."""
    if models is None:
        return None
    names = sorted({m.strip() for m in models if m.strip()})
    if not names:
        raise ApiKeyError("give at least one model the key may use, or none to allow all")
    if any("," in m for m in names):
        raise ApiKeyError("a model name cannot contain a comma")
    text = ",".join(names)
    if len(text) > MAX_MODELS_CHARS:
        raise ApiKeyError(f"the model list has at most {MAX_MODELS_CHARS} characters")
    return text


def _duplicate(name: str) -> ApiKeyError:
    return ApiKeyConflict(
        f"an API key named {name!r} already exists (revoked keys keep their names); "
        "choose another name"
    )


def _aware(ts: datetime) -> datetime:
    # SQLite hands back naive datetimes; every timestamp Vigil writes is UTC.
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def _snapshot(record: ApiKeyRecord) -> dict[str, Any]:
    return {
        "name": record.name,
        "key_prefix": record.key_prefix,
        "priority": record.priority.name.lower(),
        "models": sorted(record.models) if record.models is not None else None,
        "rate_limit_per_minute": record.rate_limit_per_minute,
        "revoked": record.revoked,
    }


def _record(row: ApiKey) -> ApiKeyRecord:
    return ApiKeyRecord(
        id=row.id,
        name=row.name,
        key_prefix=row.key_prefix,
        priority=PRIORITY_NAMES[row.priority],
        models=frozenset(row.models.split(",")) if row.models is not None else None,
        rate_limit_per_minute=row.rate_limit_per_minute,
        created_at=_aware(row.created_at),
        revoked_at=_aware(row.revoked_at) if row.revoked_at is not None else None,
    )
