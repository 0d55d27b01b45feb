"""The events a webhook can subscribe to, and what the webhooks domain hands out."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

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


def forbidden_address(host: str) -> bool:
    """Link-local addresses (169.254.0.0/16, fe80::/10: where cloud metadata services
    answer) and the AWS IPv6 metadata address: never a webhook's host."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return ip.is_link_local or ip == ipaddress.ip_address("fd00:ec2::254")


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


@dataclass(frozen=True, slots=True)
class WebhookTarget:
    """What the deliverer needs: where to post and how to sign."""

    name: str
    url: str
    secret: str
