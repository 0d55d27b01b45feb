"""Webhooks: where alerts are delivered, for which events, signed with which secret.

The secret signs each delivery, so it is stored as given (not hashed) and leaves the
service in full only twice: from `create` (to show the operator once) and from
`targets` (to the deliverer). Listings and the audit log carry a hint of it.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from vigil.platform.control.audit import AuditRepository, OnChange
from vigil.platform.control.names import check_name
from vigil.platform.control.tables import Webhook, aware
from vigil.platform.errors import Conflict, InvalidRequest, NotFound

SECRET_PREFIX = "whsec_"
MIN_SECRET_CHARS = 16


class WebhookEvent(StrEnum):
    SLO_BURN = "slo.burn"  # an error budget burns too fast
    SLO_RECOVERED = "slo.recovered"
    SHED = "shed"  # a deployment started shedding load
    FALLBACK = "fallback"  # a deployment started falling back
    CANARY_ROLLBACK = "canary.rollback"  # a canary was rolled back automatically
    WORKER_DOWN = "worker.down"


@dataclass(frozen=True, slots=True)
class WebhookRecord:
    name: str
    url: str
    events: tuple[WebhookEvent, ...]
    enabled: bool
    secret_hint: str  # the secret's last characters, to tell which one is set
    created_at: datetime


@dataclass(frozen=True, slots=True)
class WebhookTarget:
    """What the deliverer needs: where to post and how to sign."""

    name: str
    url: str
    secret: str


def secret_hint(secret: str) -> str:
    return "..." + secret[-4:]


class WebhookRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def get(self, name: str) -> Webhook | None:
        stmt = select(Webhook).where(Webhook.name == name)
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def list(self) -> Sequence[Webhook]:
        return (await self.session.execute(select(Webhook).order_by(Webhook.name))).scalars().all()

    def add(self, row: Webhook) -> None:
        self.session.add(row)

    async def delete(self, row: Webhook) -> None:
        await self.session.delete(row)


class WebhookService:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], on_change: OnChange) -> None:
        self._sessions = sessions
        self._on_change = on_change

    async def create(
        self,
        name: str,
        url: str,
        events: Sequence[str],
        *,
        secret: str | None = None,
        enabled: bool = True,
        actor: str,
    ) -> tuple[WebhookRecord, str]:
        """The new webhook and its secret (generated when not given): the only time the
        caller sees the secret."""
        check_name(name, "a webhook")
        secret = _check_secret(secret) if secret is not None else _new_secret()
        row = Webhook(
            name=name,
            url=_check_url(url),
            secret=secret,
            events=_check_events(events),
            enabled=enabled,
        )
        try:
            async with self._sessions.begin() as session:
                repo = WebhookRepository(session)
                if await repo.get(name) is not None:
                    raise _exists(name)
                repo.add(row)
                await session.flush()
                AuditRepository(session).add(
                    actor, "webhook.create", "webhook", name, None, _snapshot(row)
                )
                record = _record(row)
        except IntegrityError:
            raise _exists(name) from None
        await self._on_change()
        return record, secret

    async def get(self, name: str) -> WebhookRecord:
        async with self._sessions() as session:
            return _record(await _webhook(session, name))

    async def update(
        self,
        name: str,
        *,
        url: str | None = None,
        events: Sequence[str] | None = None,
        enabled: bool | None = None,
        actor: str,
    ) -> WebhookRecord:
        """Change the fields given (None: keep). A new secret means a new webhook."""
        async with self._sessions.begin() as session:
            row = await _webhook(session, name)
            before = _snapshot(row)
            if url is not None:
                row.url = _check_url(url)
            if events is not None:
                row.events = _check_events(events)
            if enabled is not None:
                row.enabled = enabled
            after = _snapshot(row)
            if after != before:
                AuditRepository(session).add(
                    actor, "webhook.update", "webhook", name, before, after
                )
            record = _record(row)
        if after != before:
            await self._on_change()
        return record

    async def delete(self, name: str, *, actor: str) -> WebhookRecord:
        async with self._sessions.begin() as session:
            row = await _webhook(session, name)
            record = _record(row)
            await WebhookRepository(session).delete(row)
            AuditRepository(session).add(
                actor, "webhook.delete", "webhook", name, _snapshot(row), None
            )
        await self._on_change()
        return record

    async def targets(self, event: WebhookEvent) -> list[WebhookTarget]:
        """The enabled webhooks that want `event`, with their secrets."""
        async with self._sessions() as session:
            rows = await WebhookRepository(session).list()
            return [
                WebhookTarget(row.name, row.url, row.secret)
                for row in rows
                if row.enabled and event.value in row.events
            ]

    async def list(self) -> list[WebhookRecord]:
        async with self._sessions() as session:
            return [_record(row) for row in await WebhookRepository(session).list()]


def _new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(24)


def _check_secret(secret: str) -> str:
    if len(secret) < MIN_SECRET_CHARS or len(secret) > 200:
        raise InvalidRequest(
            f"a webhook secret needs {MIN_SECRET_CHARS} to 200 characters; leave it out to "
            "get a generated one",
            param="secret",
            code="invalid_value",
        )
    return secret


def _check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or len(url) > 2000:
        raise InvalidRequest(
            f"{url[:80]!r} is not a webhook URL: give an http:// or https:// URL with a host",
            param="url",
            code="invalid_value",
        )
    return url


def _check_events(events: Sequence[str]) -> list[str]:
    known = [e.value for e in WebhookEvent]
    unknown = [e for e in events if e not in known]
    if unknown or not events:
        what = f"unknown event(s) {', '.join(map(repr, unknown))}" if unknown else "no events"
        raise InvalidRequest(
            f"{what}; a webhook subscribes to one or more of: {', '.join(known)}",
            param="events",
            code="invalid_value",
        )
    return sorted(set(events))


def _snapshot(row: Webhook) -> dict[str, Any]:
    return {
        "name": row.name,
        "url": row.url,
        "events": list(row.events),
        "enabled": row.enabled,
        "secret_hint": secret_hint(row.secret),
    }


def _record(row: Webhook) -> WebhookRecord:
    return WebhookRecord(
        name=row.name,
        url=row.url,
        events=tuple(WebhookEvent(e) for e in row.events),
        enabled=row.enabled,
        secret_hint=secret_hint(row.secret),
        created_at=aware(row.created_at),
    )


async def _webhook(session: AsyncSession, name: str) -> Webhook:
    row = await WebhookRepository(session).get(name)
    if row is None:
        raise NotFound(
            f"no webhook is named {name!r}; GET /api/admin/webhooks lists them",
            param="webhook",
            code="webhook_not_found",
        )
    return row


def _exists(name: str) -> Conflict:
    return Conflict(f"a webhook named {name!r} already exists", param="name", code="name_taken")
