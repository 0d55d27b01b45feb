"""Webhook delivery from the outbox (SQLite and PostgreSQL) to a real HTTP receiver on
127.0.0.1: Alertmanager's payload, signed, retried with back-off while the receiver is
down, each delivery id arriving once after de-duplication, nothing lost when the
deliverer starts afresh."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fakes import serving
from litestar import Litestar, Request, Response, post

from vigil.platform.alerts.connect import webhook_client
from vigil.platform.alerts.delivery import (
    BATCH,
    WebhookDelivery,
    backoff_s,
    render,
)
from vigil.platform.alerts.signing import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    signature,
    verify,
)
from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.migrate import migrate
from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.webhooks.addresses import WebhookAddressPolicy
from vigil.platform.control.webhooks.records import WebhookEvent, WebhookFormat
from vigil.platform.errors import InvalidRequest

SECRET = "whsec_0123456789abcdef0123"
PUBLIC = "https://vigil.example.com"  # the gateway's external URL
LOCAL = WebhookAddressPolicy(allow_loopback=True)  # the receivers here are on 127.0.0.1


@dataclass
class Receiver:
    """An on-call receiver that checks every signature and can be made to fail."""

    down: bool = False
    received: list[dict[str, Any]] = field(default_factory=list)
    delivery_ids: list[str] = field(default_factory=list)
    bad_signatures: int = 0

    def app(self) -> Litestar:
        @post("/hook", status_code=200)
        async def hook(request: Request[Any, Any, Any]) -> Response[str]:
            if self.down:
                return Response("down", status_code=503)
            body = await request.body()
            if not verify(SECRET, request.headers.get(SIGNATURE_HEADER, ""), body, time.time()):
                self.bad_signatures += 1
                return Response("bad signature", status_code=401)
            self.delivery_ids.append(request.headers[DELIVERY_HEADER])
            self.received.append(json.loads(body))
            return Response("ok")

        return Litestar([hook])


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The outbox must hold on both databases Vigil runs on."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    return f"sqlite+aiosqlite:///{tmp_path / 'vigil.db'}"


@pytest.fixture
async def plane(database_url: str) -> AsyncIterator[ControlPlane]:
    url = database_url
    await asyncio.to_thread(migrate, url)
    engine = create_engine(url)
    yield ControlPlane(session_factory(engine), webhook_policy=LOCAL)
    await engine.dispose()


def test_signatures_verify_and_a_tampered_body_or_an_old_one_does_not() -> None:
    body = b'{"status": "firing"}'
    header = signature(SECRET, 1_000_000, body)
    assert verify(SECRET, header, body, now_s=1_000_010)
    assert not verify(SECRET, header, body.replace(b"firing", b"resolved"), now_s=1_000_010)
    assert not verify("whsec_another_secret_entirely", header, body, now_s=1_000_010)
    assert not verify(SECRET, header, body, now_s=1_000_000 + 3600)  # replayed an hour on
    assert not verify(SECRET, "v1=deadbeef", body, now_s=1_000_000)


def test_back_off_grows_with_full_jitter_and_a_cap() -> None:
    rng = random.Random(0)
    assert all(0 <= backoff_s(0, rng) <= 1.0 for _ in range(100))
    assert all(0 <= backoff_s(5, rng) <= 32.0 for _ in range(100))
    assert max(backoff_s(30, rng) for _ in range(100)) <= 300.0


async def test_a_firing_alert_reaches_the_receiver_as_alertmanager_would_send_it(
    plane: ControlPlane,
) -> None:
    receiver = Receiver()
    async with serving(receiver.app()) as url, webhook_client(LOCAL) as client:
        await plane.webhooks.create(
            "oncall", f"{url}/hook", ["slo.burn", "slo.recovered"], secret=SECRET, actor="ops"
        )
        fired = await plane.alerts.fire("chat", "ttft", "page", "chat burns", {"burn_1h": 20.0})
        assert fired is not None
        assert await plane.alerts.fire("chat", "ttft", "page", "again", {}) is None  # no twin
        delivery = WebhookDelivery(plane.outbox, client, max_age_s=60, base_url=PUBLIC)
        assert await delivery.send_due() == 1
        await plane.alerts.resolve(fired.fingerprint, {"burn_1h": 0.5})
        assert await delivery.send_due() == 1
        assert await delivery.send_due() == 0  # nothing owed any more
    firing, resolved = receiver.received
    assert firing["version"] == "4" and firing["receiver"] == "oncall"
    assert firing["status"] == "firing" and firing["groupKey"].startswith("{}:{alertname=")
    [alert] = firing["alerts"]
    assert alert["labels"] == {
        "alertname": "VigilSLOBurn",
        "service": "vigil",
        "deployment": "chat",
        "sli": "ttft",
        "severity": "page",
    }
    assert alert["endsAt"] == "0001-01-01T00:00:00Z" and alert["fingerprint"]
    # Links a person opens from a page: absolute, on the gateway's external URL.
    assert firing["externalURL"] == PUBLIC
    assert alert["generatorURL"] == f"{PUBLIC}/console/slos/chat"
    assert alert["annotations"]["runbook_url"] == f"{PUBLIC}/runbooks/slo-burn"
    assert resolved["status"] == "resolved"
    assert resolved["alerts"][0]["fingerprint"] == alert["fingerprint"]
    assert resolved["alerts"][0]["endsAt"] != "0001-01-01T00:00:00Z"
    log = await plane.outbox.log("oncall")
    assert [(a.status_code, a.delivered) for a in log] == [(200, True), (200, True)]


async def test_a_receiver_down_gets_every_message_once_it_is_back(plane: ControlPlane) -> None:
    receiver = Receiver(down=True)
    async with serving(receiver.app()) as url, webhook_client(LOCAL) as client:
        await plane.webhooks.create("oncall", f"{url}/hook", ["slo.burn"], secret=SECRET, actor="o")
        for sli in ("ttft", "availability", "tokens_per_s"):
            await plane.alerts.fire("chat", sli, "page", f"{sli} burns", {})
        delivery = WebhookDelivery(plane.outbox, client, max_age_s=60, rng=random.Random(1))
        for _ in range(3):  # down: each try fails and is put off a little
            await delivery.send_due()
            for message in await plane.outbox.due(datetime.now(UTC) + timedelta(hours=1), 10):
                assert message.num_attempts >= 1
            await _all_due_now(plane)
        receiver.down = False
        # A deliverer started afresh (a restart) finds what is still owed in the database.
        fresh = WebhookDelivery(plane.outbox, client, max_age_s=60)
        assert await fresh.send_due() == 3
        # The receiver's answer is lost once: the same delivery goes again, same id.
        await _all_due_now(plane, undeliver=True)
        await fresh.send_due()
    assert len(receiver.delivery_ids) == 6 and len(set(receiver.delivery_ids)) == 3
    assert sorted(r["alerts"][0]["labels"]["sli"] for r in receiver.received[:3]) == [
        "availability",
        "tokens_per_s",
        "ttft",
    ]
    log = await plane.outbox.log("oncall")
    assert sum(a.status_code == 503 for a in log) == 9 and receiver.bad_signatures == 0


async def test_a_message_too_old_is_given_up_and_logged(plane: ControlPlane) -> None:
    async with webhook_client(LOCAL) as client:
        await plane.webhooks.create(
            "nowhere", "http://127.0.0.1:9/hook", ["slo.burn"], secret=SECRET, actor="ops"
        )
        await plane.alerts.fire("chat", "ttft", "page", "chat burns", {})
        delivery = WebhookDelivery(plane.outbox, client, max_age_s=0.0)
        assert await delivery.send_due() == 1
        assert await delivery.send_due() == 0
    [attempt] = await plane.outbox.log("nowhere")
    assert attempt.gave_up and not attempt.delivered and "ConnectError" in (attempt.error or "")


async def test_metadata_and_link_local_hosts_are_refused(plane: ControlPlane) -> None:
    for url in ("http://169.254.169.254/latest", "http://[fd00:ec2::254]/", "http://[fe80::1]/x"):
        with pytest.raises(InvalidRequest) as caught:
            await plane.webhooks.create("meta", url, ["slo.burn"], actor="ops")
        assert caught.value.code == "forbidden_address"
    for url in ("ftp://oncall.example/hook", "http:///hook"):
        with pytest.raises(InvalidRequest):
            await plane.webhooks.create("bad", url, ["slo.burn"], actor="ops")


async def test_a_webhook_can_push_to_alertmanagers_api_and_be_sent_a_test(
    plane: ControlPlane,
) -> None:
    await plane.webhooks.create(
        "am",
        "http://127.0.0.1:9093/api/v2/alerts",
        ["slo.burn"],
        format=WebhookFormat.ALERTMANAGER_API,
        actor="ops",
    )
    delivery_id = await plane.outbox.send_test("am")
    [message] = await plane.outbox.due(datetime.now(UTC), 10)
    assert (message.delivery_id, message.event, message.format) == (
        delivery_id,
        "test",
        "alertmanager_api",
    )
    [posted] = json.loads(render(message, "https://ops.example/vigil"))
    assert posted["labels"]["alertname"] == "VigilTest" and "endsAt" in posted
    assert set(posted) == {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}
    assert posted["generatorURL"] == "https://ops.example/vigil/console/alerts"  # its prefix kept
    decision = await plane.alerts.decide(
        "chat", "shed_batch", "on", "batch shed", {"burn_5m": 30.0}, WebhookEvent.SHED, True
    )
    assert decision.kind == "shed_batch"
    assert (await plane.alerts.decisions("chat"))[0].details == {"burn_5m": 30.0}


async def test_a_url_that_does_not_fit_its_alertmanager_format_is_refused_naming_the_fix(
    plane: ControlPlane,
) -> None:
    # An Alertmanager answers 405 on its base URL: every delivery there would fail.
    with pytest.raises(InvalidRequest) as caught:
        await plane.webhooks.create(
            "am",
            "http://user:pw@127.0.0.1:9093/",
            ["slo.burn"],
            format=WebhookFormat.ALERTMANAGER_API,
            actor="ops",
        )
    assert caught.value.code == "alertmanager_path" and caught.value.param == "url"
    assert "'http://127.0.0.1:9093/api/v2/alerts'" in caught.value.message  # no credentials
    # Its API takes alerts, not a webhook payload.
    with pytest.raises(InvalidRequest) as caught:
        await plane.webhooks.create(
            "am", "http://127.0.0.1:9093/api/v2/alerts", ["slo.burn"], actor="ops"
        )
    assert caught.value.param == "format" and "alertmanager_api" in caught.value.message
    # A change of format alone is checked against the URL it keeps.
    await plane.webhooks.create("hook", "http://127.0.0.1:9000/hook", ["slo.burn"], actor="ops")
    with pytest.raises(InvalidRequest, match="/api/v2/alerts"):
        await plane.webhooks.update("hook", format=WebhookFormat.ALERTMANAGER_API, actor="ops")


async def _all_due_now(plane: ControlPlane, undeliver: bool = False) -> None:
    """Move every pending message's next attempt to now (the test does not wait out the
    back-off); `undeliver`: as if the receiver's answers had been lost."""
    from sqlalchemy import update

    from vigil.platform.control.webhooks.tables import OutboxMessage

    async with plane.outbox._sessions.begin() as session:
        values: dict[str, Any] = {"next_attempt_at": datetime.now(UTC) - timedelta(seconds=1)}
        if undeliver:
            values["delivered_at"] = None
        await session.execute(update(OutboxMessage).values(**values))


def test_the_readmes_verification_snippet_accepts_a_delivery_and_refuses_a_forgery() -> None:
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    snippet = readme.split("A receiver checks it so:\n\n```python\n", 1)[1].split("```", 1)[0]
    scope: dict[str, Any] = {}
    exec(snippet, scope)  # the README's own code, as a receiver would paste it
    body = b'{"status": "firing"}'
    header = signature(SECRET, int(time.time()), body)
    assert scope["verified"](SECRET, header, body)
    assert not scope["verified"](SECRET, header, body + b" ")


async def test_a_message_goes_out_when_written_not_at_the_next_poll(plane: ControlPlane) -> None:
    receiver = Receiver()
    async with serving(receiver.app()) as url, webhook_client(LOCAL) as client:
        await plane.webhooks.create("oncall", f"{url}/hook", ["slo.burn"], secret=SECRET, actor="o")
        # A poll far longer than the test may take: only the wake can send it in time.
        delivery = WebhookDelivery(
            plane.outbox, client, max_age_s=60, wake=plane.outbox_written, poll_interval_s=600
        )
        loop = asyncio.create_task(delivery.run())
        try:
            await asyncio.sleep(0.2)  # the first pass is done: the loop waits on its poll
            await plane.alerts.fire("chat", "ttft", "page", "chat burns", {})
            await _until(lambda: receiver.received, 30)
        finally:
            loop.cancel()


async def test_an_alerts_resolve_waits_behind_its_firing_across_retries_and_restarts(
    database_url: str, plane: ControlPlane
) -> None:
    """The firing fails and is put off; the resolve, written meanwhile, is not due until
    the firing is delivered, even to a deliverer started afresh over the same database;
    another alert's messages, and test events, do not wait on it."""
    receiver = Receiver(down=True)
    async with serving(receiver.app()) as url, webhook_client(LOCAL) as client:
        await plane.webhooks.create(
            "oncall", f"{url}/hook", ["slo.burn", "slo.recovered"], secret=SECRET, actor="o"
        )
        fired = await plane.alerts.fire("chat", "ttft", "page", "chat burns", {})
        assert fired is not None
        delivery = WebhookDelivery(plane.outbox, client, max_age_s=60, rng=random.Random(2))
        assert await delivery.send_due() == 1  # the firing fails: put off
        await plane.alerts.resolve(fired.fingerprint, {})
        other = await plane.alerts.fire("chat", "availability", "page", "it fails", {})
        assert other is not None
        test_id = await plane.outbox.send_test("oncall")
        later = datetime.now(UTC) + timedelta(hours=1)  # every back-off has passed
        assert [(m.event, m.payload["status"]) for m in await plane.outbox.due(later, 10)] == [
            ("slo.burn", "firing"),
            ("slo.burn", "firing"),  # the other alert's
            ("test", "firing"),
        ]
        await _all_due_now(plane)
        assert await delivery.send_due() == 3  # all down again; the resolve is not sent
        # A restart: a new engine and services over the same database.
        engine = create_engine(database_url)
        try:
            restarted = ControlPlane(session_factory(engine), webhook_policy=LOCAL)
            assert len(await restarted.outbox.due(later, 10)) == 3  # still not the resolve
            receiver.down = False
            await _all_due_now(restarted)
            fresh = WebhookDelivery(restarted.outbox, client, max_age_s=60)
            assert await fresh.send_due() == 3
            [resolve] = await restarted.outbox.due(later, 10)  # its firing is delivered now
            assert resolve.payload["status"] == "resolved"
            assert await fresh.send_due() == 1
        finally:
            await engine.dispose()
    statuses = [
        (r["alerts"][0]["labels"].get("sli"), r["alerts"][0]["status"]) for r in receiver.received
    ]
    assert statuses.index(("ttft", "firing")) < statuses.index(("ttft", "resolved"))
    assert test_id in receiver.delivery_ids and len(receiver.received) == 4


async def test_a_resolve_goes_out_once_its_firing_is_given_up(plane: ControlPlane) -> None:
    """A firing too old to send any more no longer holds its resolve back."""
    async with webhook_client(LOCAL) as client:
        await plane.webhooks.create(
            "nowhere", "http://127.0.0.1:9/hook", ["slo.burn", "slo.recovered"], actor="ops"
        )
        fired = await plane.alerts.fire("chat", "ttft", "page", "chat burns", {})
        assert fired is not None
        await plane.alerts.resolve(fired.fingerprint, {})
        [firing] = await plane.outbox.due(datetime.now(UTC), 10)
        assert firing.payload["status"] == "firing"
        delivery = WebhookDelivery(plane.outbox, client, max_age_s=0.0)
        assert await delivery.send_due() == 1  # fails, too old to retry: given up
        [resolve] = await plane.outbox.due(datetime.now(UTC), 10)
        assert resolve.payload["status"] == "resolved"


@contextlib.asynccontextmanager
async def hanging() -> AsyncIterator[tuple[str, list[str]]]:
    """A receiver on 127.0.0.1 that reads each request and never answers; its URL, and
    the paths of the requests it holds."""
    held: list[str] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        held.append(head.split(b" ")[1].decode())
        with contextlib.suppress(Exception):
            await reader.read()  # until the deliverer gives up and hangs up
        writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", held
    finally:
        server.close()


async def _until(check: Any, timeout_s: float) -> float:
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < timeout_s, "not in time"
        await asyncio.sleep(0.01)
    return time.monotonic() - t0


async def test_a_hanging_receiver_delays_only_its_own_messages(plane: ControlPlane) -> None:
    receiver = Receiver()
    async with (
        hanging() as (hang_url, held),
        serving(receiver.app()) as url,
        webhook_client(LOCAL) as client,
    ):
        await plane.webhooks.create("hang", f"{hang_url}/hook", ["slo.burn"], actor="o")
        await plane.webhooks.create("oncall", f"{url}/hook", ["slo.burn"], secret=SECRET, actor="o")
        delivery = WebhookDelivery(
            plane.outbox, client, max_age_s=60, wake=plane.outbox_written, attempt_timeout_s=1.5
        )
        loop = asyncio.create_task(delivery.run())
        try:
            await plane.outbox.send_test("hang")
            await _until(lambda: held, 5)
            await plane.outbox.send_test("oncall")
            assert await _until(lambda: receiver.received, 5) < 0.5  # not behind the hang
            took_s = await _until(lambda: len(held) == 2, 10)  # cut off at 1.5 s, retried
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
    [attempt, *_] = await plane.outbox.log("hang")
    assert attempt.error == "no answer within 1.5 s" and 1400 < attempt.latency_ms < 2500
    assert took_s < 4.0


async def test_at_most_max_receivers_are_sent_to_at_once(plane: ControlPlane) -> None:
    async with hanging() as (hang_url, held), webhook_client(LOCAL) as client:
        for name in ("a", "b", "c"):
            await plane.webhooks.create(name, f"{hang_url}/{name}", ["slo.burn"], actor="o")
            await plane.outbox.send_test(name)
        delivery = WebhookDelivery(  # max_age_s=0: each failed message is given up
            plane.outbox, client, max_age_s=0, attempt_timeout_s=1.0, max_receivers=2
        )
        lanes, num_messages = await delivery.start_due()
        assert (len(lanes), num_messages) == (2, 2)
        assert await delivery.start_due() == ([], 0)  # full: the third waits
        await _until(lambda: len(held) == 2, 5)
        await asyncio.gather(*lanes)  # both cut off at 1 s
        lanes, num_messages = await delivery.start_due()  # c's turn
        assert num_messages == 1 and [lane.get_name() for lane in lanes] == ["webhook c"]
        await asyncio.gather(*lanes)
    assert sorted(held) == ["/a", "/b", "/c"]


async def test_one_alerts_messages_keep_their_order_under_the_running_loop(
    plane: ControlPlane,
) -> None:
    """The firing is slow to be answered; the resolve, written meanwhile, still comes
    after it."""
    arrivals: list[str] = []

    @post("/hook", status_code=200)
    async def hook(request: Request[Any, Any, Any]) -> str:
        status = json.loads(await request.body())["status"]
        if status == "firing":
            await asyncio.sleep(0.3)
        arrivals.append(status)
        return "ok"

    async with serving(Litestar([hook])) as url, webhook_client(LOCAL) as client:
        await plane.webhooks.create(
            "oncall", f"{url}/hook", ["slo.burn", "slo.recovered"], actor="o"
        )
        delivery = WebhookDelivery(plane.outbox, client, max_age_s=60, wake=plane.outbox_written)
        loop = asyncio.create_task(delivery.run())
        try:
            fired = await plane.alerts.fire("chat", "ttft", "page", "chat burns", {})
            assert fired is not None
            await asyncio.sleep(0.05)
            await plane.alerts.resolve(fired.fingerprint, {})
            await _until(lambda: len(arrivals) == 2, 10)
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
    assert arrivals == ["firing", "resolved"]


async def test_the_audit_log_keeps_a_webhooks_url_redacted_and_each_change_of_it(
    plane: ControlPlane,
) -> None:
    await plane.webhooks.create(
        "oncall", "https://u:pw@pager.example/k/one?t=1", ["slo.burn"], actor="ops"
    )
    await plane.webhooks.update("oncall", url="https://u:pw@pager.example/k/two", actor="ops")
    entries = await plane.audit.list(entity_type="webhook")
    assert [e.action for e in entries] == ["webhook.update", "webhook.create"]
    assert all("pw" not in json.dumps([e.before, e.after]) for e in entries)
    assert entries[0].after is not None and entries[0].after["url"] == "https://…@pager.example/…"


async def test_one_webhooks_full_batch_does_not_keep_another_waiting(plane: ControlPlane) -> None:
    """More messages due for one webhook than a pass hands out: the other webhook's
    lane starts in the same pass all the same."""
    async with webhook_client(LOCAL) as client:
        for name in ("busy", "quiet"):
            await plane.webhooks.create(name, "http://127.0.0.1:9/", ["slo.burn"], actor="o")
        for _ in range(BATCH + 5):
            await plane.outbox.send_test("busy")
        await plane.outbox.send_test("quiet")
        delivery = WebhookDelivery(plane.outbox, client, max_age_s=0)
        lanes, num_messages = await delivery.start_due()
        assert sorted(lane.get_name() for lane in lanes) == ["webhook busy", "webhook quiet"]
        assert num_messages == BATCH + 1
        await asyncio.gather(*lanes)
