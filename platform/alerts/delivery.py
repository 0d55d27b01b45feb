"""Webhook delivery to on-call, from the outbox (control/webhooks/outbox.py): at least
once, signed, retried with exponential back-off and full jitter until delivered or too
old, surviving restarts of Vigil and of the receiver (the outbox is in the database).
One alert's messages reach a webhook in the order written (the outbox hands out the
next one only once the one before is delivered or given up); different alerts go out
side by side.

Each message goes out in its webhook's format:
- alertmanager_webhook: Alertmanager's webhook payload, version 4, with one alert, so
  receivers written for Alertmanager work unchanged;
- alertmanager_api: the alert POSTed to a real Alertmanager's /api/v2/alerts, to be
  routed by what a team runs already (a firing alert is sent with an end a day ahead;
  its resolution ends it).
A URL whose host resolves to a link-local or cloud metadata address is never called.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx

from vigil.platform.alerts.signing import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    signature,
)
from vigil.platform.control.webhooks.outbox import DueMessage, OutboxService
from vigil.platform.control.webhooks.records import forbidden_address

log = logging.getLogger(__name__)

ATTEMPT_TIMEOUT_S = 10.0
BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 300.0
BATCH = 50  # messages sent per pass, concurrently
POLL_INTERVAL_S = 1.0
API_FIRING_HORIZON = timedelta(days=1)


def backoff_s(num_attempts: int, rng: random.Random) -> float:
    """Full jitter: uniform up to base * 2^attempts, capped."""
    return rng.uniform(0.0, min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2.0**num_attempts))


def render(message: DueMessage) -> bytes:
    alert: dict[str, Any] = message.payload
    if message.format == "alertmanager_api":
        posted = {k: alert[k] for k in ("labels", "annotations", "startsAt", "generatorURL")}
        if alert["status"] == "firing":
            starts = datetime.fromisoformat(alert["startsAt"])
            posted["endsAt"] = (starts + API_FIRING_HORIZON).isoformat()
        else:
            posted["endsAt"] = alert["endsAt"]
        return json.dumps([posted]).encode()
    labels = alert["labels"]
    group = f"alertname={labels.get('alertname', '')},deployment={labels.get('deployment', '')}"
    body = {
        "version": "4",
        "groupKey": "{}:{" + group + "}",
        "truncatedAlerts": 0,
        "status": alert["status"],
        "receiver": message.webhook,
        "groupLabels": {"alertname": labels.get("alertname", "")},
        "commonLabels": labels,
        "commonAnnotations": alert["annotations"],
        "externalURL": "",
        "alerts": [alert],
    }
    return json.dumps(body).encode()


async def _resolves_forbidden(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if forbidden_address(host):
        return True
    try:
        infos = await asyncio.to_thread(socket.getaddrinfo, host, None)
    except OSError:
        return False  # the send fails and is retried like any unreachable receiver
    return any(forbidden_address(str(info[4][0])) for info in infos)


class WebhookDelivery:
    def __init__(
        self,
        outbox: OutboxService,
        client: httpx.AsyncClient,
        max_age_s: float,
        rng: random.Random | None = None,
        wake: asyncio.Event | None = None,
    ) -> None:
        """`wake`: set when a message is written, so it goes out at once; the poll
        catches the rest (retries that come due, messages another gateway wrote)."""
        self.outbox = outbox
        self.client = client
        self.max_age_s = max_age_s
        self._rng = rng or random.Random()
        self._wake = wake or asyncio.Event()

    async def run(self, owns: Callable[[], bool] = lambda: True) -> None:
        """Until cancelled, sending while `owns()` (the gateway that owns the loops:
        control/ownership.py), so that each message goes out from one gateway."""
        while True:
            try:
                if owns():
                    await self.send_due()
            except Exception:  # the next pass tries again; nothing is lost
                log.exception("webhook delivery pass failed")
            with contextlib.suppress(TimeoutError):  # not wait_for: see control/ownership.py
                async with asyncio.timeout(POLL_INTERVAL_S):
                    await self._wake.wait()
            self._wake.clear()

    async def send_due(self) -> int:
        due = await self.outbox.due(datetime.now(UTC), BATCH)
        await asyncio.gather(*(self._send(m) for m in due))
        return len(due)

    async def _send(self, message: DueMessage) -> None:
        body = render(message)
        headers = {
            "Content-Type": "application/json",
            DELIVERY_HEADER: message.delivery_id,
            EVENT_HEADER: message.event,
            SIGNATURE_HEADER: signature(message.secret, int(time.time()), body),
        }
        status, error = None, None
        t0 = time.perf_counter()
        if await _resolves_forbidden(message.url):
            error = "refused: the URL's host is a link-local or metadata address"
        else:
            try:
                response = await self.client.post(
                    message.url, content=body, headers=headers, timeout=ATTEMPT_TIMEOUT_S
                )
                status = response.status_code
                if not 200 <= status < 300:
                    error = f"HTTP {status}: {response.text[:200]}"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"[:500]
        latency_ms = (time.perf_counter() - t0) * 1000
        delivered = error is None
        next_at = None
        age_s = (datetime.now(UTC) - message.created_at).total_seconds()
        if not delivered and age_s < self.max_age_s:
            wait_s = backoff_s(message.num_attempts, self._rng)
            next_at = datetime.now(UTC) + timedelta(seconds=wait_s)
        if not delivered and next_at is None:
            log.error("webhook %s: gave up on delivery %s", message.webhook, message.delivery_id)
        await self.outbox.attempted(
            message.id,
            status_code=status,
            latency_ms=latency_ms,
            error=error,
            delivered=delivered,
            next_attempt_at=next_at,
        )
        if delivered or next_at is None:  # the alert's next message may wait on this one
            self._wake.set()
