"""The rules for API keys, for the admin API and the CLI alike, and the lookup a request's
key goes through.

A key is `vgl_` + 256 random bits. The plaintext leaves `create` once and is never
stored or logged; the database keeps its SHA-256, which is also how a request finds it.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Sequence
from typing import Any

from sqlalchemy.exc import IntegrityError

from vigil.engine.request import Priority
from vigil.platform.control.access.records import ApiKeyRecord
from vigil.platform.control.access.repository import ApiKeyRepository
from vigil.platform.control.access.tables import ApiKey
from vigil.platform.control.audit.repository import AuditRepository
from vigil.platform.control.db import Service, utcnow
from vigil.platform.control.names import must_exist
from vigil.platform.errors import Conflict, InvalidRequest

log = logging.getLogger(__name__)

KEY_PREFIX = "vgl_"
NUM_PREFIX_CHARS = 12  # "vgl_" and 8 random characters: enough to tell keys apart
MAX_NAME_CHARS = 200
MAX_MODELS_CHARS = 2000


def hash_key(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


class ApiKeyService(Service):
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
            raise _invalid(
                f"a rate limit must be at least 1 request per minute, got "
                f"{rate_limit_per_minute}; leave it out for no limit"
            )
        plaintext = new_key()
        row = ApiKey(
            name=name,
            key_prefix=plaintext[:NUM_PREFIX_CHARS],
            key_hash=hash_key(plaintext),
            priority=priority.label,
            models=models_text,
            rate_limit_per_minute=rate_limit_per_minute,
        )
        try:
            async with self._sessions.begin() as session:
                repo = ApiKeyRepository(session)
                if await repo.get(name) is not None:
                    raise _duplicate(name)
                repo.add(row)
                await session.flush()  # assigns the id and created_at
                record = ApiKeyRecord.of(row)
                AuditRepository(session).log(
                    actor, "key.create", "key", name, None, _snapshot(record)
                )
        except IntegrityError:  # another process took the name in between
            raise _duplicate(name) from None
        log.info("created API key %r (%s)", name, record.key_prefix)
        await self._on_change()
        return record, plaintext

    async def list(self) -> list[ApiKeyRecord]:
        async with self._sessions() as session:
            return [ApiKeyRecord.of(row) for row in await ApiKeyRepository(session).list()]

    async def revoke(self, name: str, *, actor: str = "cli") -> ApiKeyRecord:
        async with self._sessions.begin() as session:
            row = must_exist(
                await ApiKeyRepository(session).get(name),
                "API key",
                name,
                param="name",
                listing="`vigil keys list` shows them",
                code="key_not_found",
            )
            if row.revoked_at is not None:
                raise Conflict(
                    f"the API key {name!r} was already revoked at "
                    f"{ApiKeyRecord.of(row).revoked_at}",
                    param="name",
                    code="key_conflict",
                )
            before = _snapshot(ApiKeyRecord.of(row))
            row.revoked_at = utcnow()
            record = ApiKeyRecord.of(row)
            AuditRepository(session).log(
                actor, "key.revoke", "key", name, before, _snapshot(record)
            )
        log.info("revoked API key %r (%s)", name, record.key_prefix)
        await self._on_change()
        return record

    async def find(self, plaintext: str) -> ApiKeyRecord | None:
        """The key's record, or None when it is unknown or revoked."""
        async with self._sessions() as session:
            row = await ApiKeyRepository(session).by_hash(hash_key(plaintext))
            return None if row is None or row.revoked_at is not None else ApiKeyRecord.of(row)


def _check_name(name: str) -> str:
    name = name.strip()
    if not name:
        raise _invalid("an API key needs a name (who or what uses it)")
    if len(name) > MAX_NAME_CHARS:
        raise _invalid(f"an API key's name has at most {MAX_NAME_CHARS} characters")
    return name


def _join_models(models: Sequence[str] | None) -> str | None:
    """The allowed deployments as stored: comma-separated, sorted; None means all."""
    if models is None:
        return None
    names = sorted({m.strip() for m in models if m.strip()})
    if not names:
        raise _invalid("give at least one model the key may use, or none to allow all")
    if any("," in m for m in names):
        raise _invalid("a model name cannot contain a comma")
    text = ",".join(names)
    if len(text) > MAX_MODELS_CHARS:
        raise _invalid(f"the model list has at most {MAX_MODELS_CHARS} characters")
    return text


def _invalid(message: str) -> InvalidRequest:
    return InvalidRequest(message, code="invalid_value")


def _duplicate(name: str) -> Conflict:
    return Conflict(
        f"an API key named {name!r} already exists (revoked keys keep their names); "
        "choose another name",
        param="name",
        code="key_conflict",
    )


def _snapshot(record: ApiKeyRecord) -> dict[str, Any]:
    return {
        "name": record.name,
        "key_prefix": record.key_prefix,
        "priority": record.priority.label,
        "models": sorted(record.models) if record.models is not None else None,
        "rate_limit_per_minute": record.rate_limit_per_minute,
        "revoked": record.revoked,
    }
