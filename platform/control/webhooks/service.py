"""The rules for webhooks: a URL with a host the address policy allows
(addresses.py), known events, a long enough secret; every write audited (the URL
redacted: it may carry credentials), and the listeners told after it commits."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from vigil.platform.control.audit.repository import AuditRepository
from vigil.platform.control.db import OnChange, Service, nothing_changed
from vigil.platform.control.names import check_name, must_exist, name_taken
from vigil.platform.control.webhooks.addresses import WebhookAddressPolicy, host_refusal
from vigil.platform.control.webhooks.records import (
    WebhookEvent,
    WebhookFormat,
    WebhookRecord,
    WebhookTarget,
    redacted_url,
    secret_hint,
)
from vigil.platform.control.webhooks.repository import WebhookRepository
from vigil.platform.control.webhooks.tables import Webhook
from vigil.platform.errors import InvalidRequest

SECRET_PREFIX = "whsec_"
MIN_SECRET_CHARS = 16


class WebhookService(Service):
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        on_change: OnChange = nothing_changed,
        policy: WebhookAddressPolicy | None = None,
    ) -> None:
        """`policy`: where a webhook may point (None: the default, public addresses)."""
        super().__init__(sessions, on_change)
        self.policy = policy or WebhookAddressPolicy()

    async def create(
        self,
        name: str,
        url: str,
        events: Sequence[str],
        *,
        secret: str | None = None,
        enabled: bool = True,
        format: WebhookFormat = WebhookFormat.ALERTMANAGER_WEBHOOK,
        actor: str,
    ) -> tuple[WebhookRecord, str]:
        """The new webhook and its secret (generated when not given): the only time the
        caller sees the secret."""
        check_name(name, "a webhook")
        secret = _check_secret(secret) if secret is not None else _new_secret()
        row = Webhook(
            name=name,
            url=_check_url(url, self.policy),
            secret=secret,
            events=_check_events(events),
            enabled=enabled,
            format=_check_format(url, WebhookFormat(format)).value,
        )
        try:
            async with self._sessions.begin() as session:
                repo = WebhookRepository(session)
                if await repo.get(name) is not None:
                    raise name_taken("webhook", name)
                repo.add(row)
                await session.flush()
                AuditRepository(session).log(
                    actor, "webhook.create", "webhook", name, None, _snapshot(row)
                )
                record = WebhookRecord.of(row)
        except IntegrityError:
            raise name_taken("webhook", name) from None
        await self._on_change()
        return record, secret

    async def get(self, name: str) -> WebhookRecord:
        async with self._sessions() as session:
            return WebhookRecord.of(await _webhook(session, name))

    async def update(
        self,
        name: str,
        *,
        url: str | None = None,
        events: Sequence[str] | None = None,
        enabled: bool | None = None,
        format: WebhookFormat | None = None,
        actor: str,
    ) -> WebhookRecord:
        """Change the fields given (None: keep). A new secret means a new webhook."""
        async with self._sessions.begin() as session:
            row = await _webhook(session, name)
            before, url_before = _snapshot(row), row.url
            if url is not None:
                row.url = _check_url(url, self.policy)
            if events is not None:
                row.events = _check_events(events)
            if enabled is not None:
                row.enabled = enabled
            if format is not None:
                row.format = WebhookFormat(format).value
            if url is not None or format is not None:
                _check_format(row.url, WebhookFormat(row.format))
            after = _snapshot(row)
            # The snapshots carry the URL redacted: a change of its path alone is one too.
            changed = after != before or row.url != url_before
            if changed:
                AuditRepository(session).log(
                    actor, "webhook.update", "webhook", name, before, after
                )
            record = WebhookRecord.of(row)
        if changed:
            await self._on_change()
        return record

    async def delete(self, name: str, *, actor: str) -> WebhookRecord:
        async with self._sessions.begin() as session:
            row = await _webhook(session, name)
            record = WebhookRecord.of(row)
            await WebhookRepository(session).delete(row)
            AuditRepository(session).log(
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
            return [WebhookRecord.of(row) for row in await WebhookRepository(session).list()]


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


def _check_url(url: str, policy: WebhookAddressPolicy) -> str:
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 (raises on a port that is no number)
    except ValueError:
        parts = parts._replace(netloc="")
    if parts.scheme not in ("http", "https") or not parts.hostname or len(url) > 2000:
        raise InvalidRequest(
            f"{url[:80]!r} is not a webhook URL: give an http:// or https:// URL with a host",
            param="url",
            code="invalid_value",
        )
    refusal = host_refusal(parts.hostname, policy)
    if refusal is not None:
        raise InvalidRequest(
            f"a webhook may not call {parts.hostname}: {refusal}. An operator opens a "
            "host or network with --webhook-allow HOST_OR_CIDR",
            param="url",
            code="forbidden_address",
        )
    return url


ALERTMANAGER_API_PATH = "/api/v2/alerts"


def _check_format(url: str, format: WebhookFormat) -> WebhookFormat:
    """An Alertmanager takes alerts at /api/v2/alerts and answers any other path with
    405, and that path takes a list of alerts, not a webhook payload: a URL and a format
    that do not fit are refused here, naming the fix, rather than failing every delivery."""
    parts = urlsplit(url)
    at_api = parts.path.rstrip("/").endswith(ALERTMANAGER_API_PATH)
    if format is WebhookFormat.ALERTMANAGER_API and not at_api:
        host = parts.netloc.rpartition("@")[2]
        right = f"{parts.scheme}://{host}{parts.path.rstrip('/')}{ALERTMANAGER_API_PATH}"
        raise InvalidRequest(
            f"an Alertmanager takes alerts at {ALERTMANAGER_API_PATH} (any other path "
            f"answers 405): give the whole URL, such as {right!r}",
            param="url",
            code="alertmanager_path",
        )
    if format is WebhookFormat.ALERTMANAGER_WEBHOOK and at_api:
        raise InvalidRequest(
            f"a URL ending in {ALERTMANAGER_API_PATH} is an Alertmanager's API, which takes "
            "alerts, not a webhook payload: send format 'alertmanager_api' with it",
            param="format",
            code="alertmanager_path",
        )
    return format


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
        "url": redacted_url(row.url),
        "events": list(row.events),
        "enabled": row.enabled,
        "format": row.format,
        "secret_hint": secret_hint(row.secret),
    }


async def _webhook(session: AsyncSession, name: str) -> Webhook:
    row = await WebhookRepository(session).get(name)
    return must_exist(
        row, "webhook", name, param="webhook", listing="GET /api/admin/webhooks lists them"
    )
