"""The events a webhook can subscribe to, and what the webhooks domain hands out."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from urllib.parse import urlsplit

from vigil.platform.control.db import aware
from vigil.platform.control.webhooks.tables import Webhook


class WebhookEvent(StrEnum):
    SLO_BURN = "slo.burn"  # an error budget burns too fast
    SLO_RECOVERED = "slo.recovered"
    SHED = "shed"  # a deployment started shedding load
    FALLBACK = "fallback"  # a deployment started falling back
    CANARY_ROLLBACK = "canary.rollback"  # a canary was rolled back automatically
    WORKER_DOWN = "worker.down"


class WebhookFormat(StrEnum):
    ALERTMANAGER_WEBHOOK = "alertmanager_webhook"  # Alertmanager's webhook payload, v4
    ALERTMANAGER_API = "alertmanager_api"  # POSTed to an Alertmanager's /api/v2/alerts


def redacted_url(url: str) -> str:
    """A webhook URL as it is shown to those who may not change it (viewers, readers in
    open mode, the audit log): its scheme, host and port; the user, password, path and
    query (where a receiver's credentials or secret path are) become "…"."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        port = ""
    user = "…@" if "@" in parts.netloc else ""
    rest = "/…" if (parts.path not in ("", "/") or parts.query or parts.fragment) else "/"
    return f"{parts.scheme}://{user}{host}{port}{rest}"


def secret_hint(secret: str) -> str:
    return "..." + secret[-4:]


@dataclass(frozen=True, slots=True)
class WebhookRecord:
    name: str
    url: str
    events: tuple[WebhookEvent, ...]
    format: WebhookFormat
    enabled: bool
    secret_hint: str  # the secret's last characters, to tell which one is set
    created_at: datetime

    @classmethod
    def of(cls, row: Webhook) -> WebhookRecord:
        return cls(
            name=row.name,
            url=row.url,
            events=tuple(WebhookEvent(e) for e in row.events),
            format=WebhookFormat(row.format),
            enabled=row.enabled,
            secret_hint=secret_hint(row.secret),
            created_at=aware(row.created_at),
        )

    def shown(self, *, may_operate: bool) -> WebhookRecord:
        """As a reader sees it: the whole URL for those who may change webhooks
        (operators, admins), the redacted one for everyone else."""
        return self if may_operate else replace(self, url=redacted_url(self.url))


@dataclass(frozen=True, slots=True)
class WebhookTarget:
    """What the deliverer needs: where to post and how to sign."""

    name: str
    url: str
    secret: str
