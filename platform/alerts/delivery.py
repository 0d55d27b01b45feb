"""Webhook delivery to on-call, from the outbox (control/webhooks/outbox.py): at least
once, signed, retried with exponential back-off and full jitter until delivered or too
old, surviving restarts of Vigil and of the receiver (the outbox is in the database).
One alert's messages reach a webhook in the order written (the outbox hands out the
next one only once the one before is delivered or given up); different alerts go out
side by side.

Receivers do not wait on each other: each webhook with messages due gets a lane of its
own, which sends them one after another, and the loop starts lanes without waiting for
any (at most MAX_RECEIVERS_IN_FLIGHT at once), so a slow or hanging receiver delays
only its own messages. While a webhook's lane runs, its messages are not handed out
again. An attempt has a bound on its whole time (resolving, connecting, sending and
reading the answer), not on each read, so a receiver trickling its answer is cut off;
of the answer, only the status and at most MAX_ANSWER_BYTES are read, and only the
status and its reason phrase are kept (the delivery log is every viewer's to read).

Each message goes out in its webhook's format:
- alertmanager_webhook: Alertmanager's webhook payload, version 4, with one alert, so
  receivers written for Alertmanager work unchanged;
- alertmanager_api: the alert POSTed to a real Alertmanager's /api/v2/alerts, to be
  routed by what a team runs already (a firing alert is sent with an end a day ahead;
  its resolution ends it).
Where it may connect is the webhook address policy's to say
(control/webhooks/addresses.py), checked on the address it connects to (connect.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx

from vigil.platform.alerts.links import with_absolute_links
from vigil.platform.alerts.signing import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    signature,
)
from vigil.platform.control.webhooks.addresses import AddressRefused
from vigil.platform.control.webhooks.outbox import DueMessage, OutboxService

log = logging.getLogger(__name__)

ATTEMPT_TIMEOUT_S = 10.0  # the default of --webhook-timeout: one whole attempt
BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 300.0
BATCH = 50  # messages handed out per pass, over the webhooks without a lane
MAX_RECEIVERS_IN_FLIGHT = 16  # webhooks being sent to at once (one lane each)
MAX_ANSWER_BYTES = 4096  # read of a receiver's answer, then the connection is dropped
MAX_REASON_CHARS = 80
POLL_INTERVAL_S = 1.0
API_FIRING_HORIZON = timedelta(days=1)


def backoff_s(num_attempts: int, rng: random.Random) -> float:
    """Full jitter: uniform up to base * 2^attempts, capped."""
    return rng.uniform(0.0, min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2.0**num_attempts))


def render(message: DueMessage, base_url: str = "") -> bytes:
    """The message's body in its webhook's format, its links joined to `base_url` (the
    gateway's public URL: links.public_base_url; "" leaves them paths)."""
    alert = with_absolute_links(message.payload, base_url)
    if message.format == "alertmanager_api":
        posted = {k: alert[k] for k in ("labels", "annotations", "startsAt", "generatorURL")}
        if alert["status"] == "firing":
            starts = datetime.fromisoformat(alert["startsAt"])
            posted["endsAt"] = (starts + API_FIRING_HORIZON).isoformat()
        else:
            posted["endsAt"] = alert["endsAt"]
        return json.dumps([posted]).encode()
    labels = alert["labels"]
    group = ",".join(f"{k}={labels[k]}" for k in ("alertname", "deployment") if k in labels)
    body = {
        "version": "4",
        "groupKey": "{}:{" + group + "}",
        "truncatedAlerts": 0,
        "status": alert["status"],
        "receiver": message.webhook,
        "groupLabels": {"alertname": labels.get("alertname", "")},
        "commonLabels": labels,
        "commonAnnotations": alert["annotations"],
        "externalURL": base_url,
        "alerts": [alert],
    }
    return json.dumps(body).encode()


class WebhookDelivery:
    def __init__(
        self,
        outbox: OutboxService,
        client: httpx.AsyncClient,
        max_age_s: float,
        rng: random.Random | None = None,
        wake: asyncio.Event | None = None,
        *,
        attempt_timeout_s: float = ATTEMPT_TIMEOUT_S,
        max_receivers: int = MAX_RECEIVERS_IN_FLIGHT,
        poll_interval_s: float = POLL_INTERVAL_S,
        base_url: str = "",
    ) -> None:
        """`client`: connect.webhook_client's, which keeps to the address policy.
        `wake`: set when a message is written, so it goes out at once; the poll catches
        the rest (retries that come due, messages another gateway wrote).
        `base_url`: what alert links are joined to (links.public_base_url)."""
        self.outbox = outbox
        self.base_url = base_url
        self.client = client
        self.max_age_s = max_age_s
        self.attempt_timeout_s = attempt_timeout_s
        self.max_receivers = max_receivers
        self.poll_interval_s = poll_interval_s
        self._rng = rng or random.Random()
        self._wake = wake or asyncio.Event()
        self._lanes: dict[str, asyncio.Task[None]] = {}  # webhook name -> its lane

    async def run(self, owns: Callable[[], bool] = lambda: True) -> None:
        """Until cancelled, sending while `owns()` (the gateway that owns the loops:
        control/ownership.py), so that each message goes out from one gateway."""
        try:
            while True:
                try:
                    if owns():
                        await self.start_due(owns)
                except Exception:  # the next pass tries again; nothing is lost
                    log.exception("webhook delivery pass failed")
                with contextlib.suppress(TimeoutError):  # not wait_for: see ownership.py
                    async with asyncio.timeout(self.poll_interval_s):
                        await self._wake.wait()
                self._wake.clear()
        finally:
            lanes = list(self._lanes.values())
            for lane in lanes:
                lane.cancel()
            await asyncio.gather(*lanes, return_exceptions=True)

    async def start_due(
        self, owns: Callable[[], bool] = lambda: True
    ) -> tuple[list[asyncio.Task[None]], int]:
        """Start a lane for each webhook that has messages due and no lane yet, up to
        the bound; the lanes started and the number of messages they carry. A full
        batch may have left other webhooks out: it asks again, without the new lanes'."""
        lanes: list[asyncio.Task[None]] = []
        num_messages = 0
        while (free := self.max_receivers - len(self._lanes)) > 0:
            due = await self.outbox.due(datetime.now(UTC), BATCH, busy=tuple(self._lanes))
            by_webhook: dict[str, list[DueMessage]] = {}
            for message in due:
                by_webhook.setdefault(message.webhook, []).append(message)
            for name, messages in list(by_webhook.items())[:free]:
                lane = asyncio.create_task(self._lane(messages, owns), name=f"webhook {name}")
                self._lanes[name] = lane
                lane.add_done_callback(functools.partial(self._lane_done, name))
                lanes.append(lane)
                num_messages += len(messages)
            if len(due) < BATCH:
                break
        return lanes, num_messages

    async def send_due(self) -> int:
        """One pass, waiting for the lanes it started; the number of messages sent."""
        lanes, num_messages = await self.start_due()
        await asyncio.gather(*lanes)
        return num_messages

    def _lane_done(self, name: str, lane: asyncio.Task[None]) -> None:
        if self._lanes.get(name) is lane:
            del self._lanes[name]
        if not lane.cancelled() and (exc := lane.exception()) is not None:
            log.error("webhook %s: delivery failed", name, exc_info=exc)
        self._wake.set()  # its next messages may be due

    async def _lane(self, messages: list[DueMessage], owns: Callable[[], bool]) -> None:
        """One webhook's messages, one after another (each of another alert)."""
        for message in messages:
            if not owns():
                return
            await self._send(message)

    async def _send(self, message: DueMessage) -> None:
        body = render(message, self.base_url)
        headers = {
            "Content-Type": "application/json",
            DELIVERY_HEADER: message.delivery_id,
            EVENT_HEADER: message.event,
            SIGNATURE_HEADER: signature(message.secret, int(time.time()), body),
        }
        t0 = time.perf_counter()
        status, error = await self._attempt(message.url, body, headers)
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

    async def _attempt(
        self, url: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int | None, str | None]:
        """The answer's status, and why the attempt failed (None: delivered)."""
        try:
            async with asyncio.timeout(self.attempt_timeout_s):
                async with self.client.stream(
                    "POST", url, content=body, headers=headers, timeout=self.attempt_timeout_s
                ) as response:
                    await _read_at_most(response, MAX_ANSWER_BYTES)
        except TimeoutError:
            return None, f"no answer within {self.attempt_timeout_s:g} s"
        except AddressRefused as exc:
            return None, f"refused: {exc}"
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}"[:300]
        status = response.status_code
        if 200 <= status < 300:
            return status, None
        reason = "".join(c for c in response.reason_phrase if c.isprintable())
        return status, f"HTTP {status} {reason[:MAX_REASON_CHARS]}".rstrip()


async def _read_at_most(response: httpx.Response, limit: int) -> None:
    """Read (and drop) the answer up to `limit` bytes; the rest is never read: leaving
    the stream early closes the connection."""
    num_bytes = 0
    async for chunk in response.aiter_raw():
        num_bytes += len(chunk)
        if num_bytes >= limit:
            break
