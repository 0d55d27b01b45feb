"""The SLO loop on a clock the test holds, over a real control plane (SQLite): alerts
fired once and resolved when the short window clears; batch shed, then fallback, then
both off again with hysteresis; a worse canary rolled back by `system`; each step a
decision row with its numbers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fakes import report_loaded
from sqlalchemy import select

from vigil.engine.bundled import SMOLLM2
from vigil.engine.request import Priority, RequestClock
from vigil.platform.control.alerts.records import NOT_ENDED, DecisionRecord
from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.deployments.records import VersionKey
from vigil.platform.control.migrate import migrate
from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.specs import (
    DeploymentSpec,
    FallbackSpec,
    FallbackTrigger,
    SLOTargets,
    bundled_version,
)
from vigil.platform.control.webhooks.tables import OutboxMessage
from vigil.platform.slo.actions import ActionBoard, Recovery, SLOActions
from vigil.platform.slo.burn import MIN_EVENTS
from vigil.platform.slo.loop import ActionState, Change, Signals, SLOLoop, plan_actions
from vigil.platform.slo.sli import SLI
from vigil.platform.slo.tracker import SLOTracker
from vigil.platform.telemetry.recorder import Outcome, RequestRecord

STABLE = bundled_version(SMOLLM2)
# A 1-hour SLO window: the first page rule's windows are 5 s and 0.42 s.
SLO = SLOTargets(ttft_p99_s=1.0, window_s=3600.0, rollback_min_requests=20)


class Clock:
    def __init__(self) -> None:
        self.now_ts = 10_000.0

    def __call__(self) -> float:
        return self.now_ts


def served(version: str, ttft_s: float) -> RequestRecord:
    clock = RequestClock(0.0, first_token_ts=ttft_s, last_token_ts=ttft_s + 1.0)
    clock.finished_ts = ttft_s + 1.0
    return RequestRecord(SMOLLM2, version, Priority.INTERACTIVE, Outcome.LENGTH, 5, 20, clock)


def signals(paging: bool, burning: bool | None = None, recovered: bool | None = None) -> Signals:
    return Signals(paging, paging if burning is None else burning, recovered)


def test_actions_step_up_and_down_one_at_a_time_with_a_hold() -> None:
    def step(s: ActionState, sig: Signals, now: float, fallback: bool = True):  # type: ignore[no-untyped-def]
        return plan_actions(s, sig, fallback, now_ts=now, hold_s=5.0, recovery_hold_s=5.0)

    s, c = step(ActionState(changed_ts=0.0), signals(True), 1.0)
    assert c == Change("shed_batch", True)
    s, c = step(s, signals(True), 3.0)
    assert c is None  # not held long enough to escalate
    s, c = step(s, signals(True), 6.0)
    assert c == Change("fallback", True) and s.actions == SLOActions(True, True)
    # No forecast to go by: the fallback ends once the burn has stopped for the hold.
    s, c = step(s, signals(False), 8.0)
    assert c is None  # one quiet moment changes nothing
    s, c = step(s, signals(False), 11.0)
    assert c is None
    s, c = step(s, signals(False), 13.0)
    assert c == Change("fallback", False)
    s, c = step(s, signals(False), 18.0)
    assert c == Change("shed_batch", False) and s.actions == SLOActions()
    s, c = step(ActionState(), signals(True), 100.0, fallback=False)
    s, c = step(s, signals(True), 200.0, fallback=False)
    assert c is None and s.actions == SLOActions(shed_batch=True)  # nothing to fall back to


def test_the_fallback_goes_back_by_the_forecast_not_by_the_windows() -> None:
    def step(s: ActionState, sig: Signals, now: float):  # type: ignore[no-untyped-def]
        return plan_actions(s, sig, True, now_ts=now, hold_s=5.0, recovery_hold_s=3.0)

    on = ActionState(SLOActions(True, True), changed_ts=0.0)
    # The deployment's own windows still burn, but it is forecast to cope with the load
    # offered: it takes it back once that has held for the recovery hold, unbroken.
    s, c = step(on, signals(False, burning=True, recovered=True), 10.0)
    s, c = step(s, signals(False, burning=True, recovered=False), 11.0)
    s, c = step(s, signals(False, burning=True, recovered=True), 12.0)
    s, c = step(s, signals(False, burning=True, recovered=True), 14.0)
    assert c is None and s.recovered_since_ts == 12.0
    s, c = step(s, signals(False, burning=True, recovered=True), 15.0)
    assert c == Change("fallback", False)
    # Its windows empty while the fallback takes its traffic: no reason to switch back.
    s, c = step(on, signals(False, burning=False, recovered=False), 100.0)
    assert c is None and s.actions.fallback
    # Switched back, the long window's memory of the old burn does not send it over
    # again: a page, a burn going on now, does.
    back = ActionState(SLOActions(shed_batch=True), changed_ts=0.0)
    s, c = step(back, signals(False, burning=True), 100.0)
    assert c is None
    s, c = step(back, signals(True), 100.0)
    assert c == Change("fallback", True)


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'vigil.db'}"
    await asyncio.to_thread(migrate, url)
    engine = create_engine(url)
    plane = ControlPlane(session_factory(engine))
    await plane.seed_bundled([SMOLLM2])
    await plane.deployments.set_slo(SMOLLM2, SLO, actor="ops")
    yield plane
    await engine.dispose()


async def test_a_ttft_burn_pages_sheds_falls_back_and_recovers(plane: ControlPlane) -> None:
    clock = Clock()
    tracker, board = SLOTracker(clock), ActionBoard()
    spec = DeploymentSpec(
        SMOLLM2, STABLE, slo=SLO, fallback=FallbackSpec("lite", FallbackTrigger.QUEUE_WAIT, 9.0)
    )
    tracker.set_targets({SMOLLM2: SLO})
    loop = SLOLoop(tracker, board, plane, lambda: {SMOLLM2: spec}, lambda _: STABLE.key, clock)
    await loop.start()
    for _ in range(50):
        tracker.record(served(STABLE.key, ttft_s=3.0))  # every first token late
    await loop.tick()
    assert board.get(SMOLLM2) == SLOActions(shed_batch=True)
    [alert] = await plane.alerts.firing()
    assert (alert.sli, alert.severity) == ("ttft", "page")
    assert alert.details["total"] == 50 and alert.details["burn_5s"] == pytest.approx(100.0)
    # It says which windows it read: a 1-hour SLO window scales 1 h and 5 min down.
    assert alert.summary == (
        f"{SMOLLM2}: the ttft SLO burns page-fast: over 14.4x its error budget in both the "
        "last 5 s and the last 417 ms"
    )
    assert (alert.details["long_window"], alert.details["short_window"]) == ("5s", "417ms")
    assert alert.details["threshold"] == 14.4
    clock.now_ts += 6.0
    for _ in range(MIN_EVENTS):  # still burning, with enough requests to say so
        tracker.record(served(STABLE.key, ttft_s=3.0))
    await loop.tick()
    assert board.get(SMOLLM2) == SLOActions(shed_batch=True, fallback=True)
    assert len(await plane.alerts.firing()) == 1  # one alert for the episode
    # The load goes: good requests only. Both page rules' short windows (0.42 s and 2.5 s)
    # must clear before the alert resolves.
    clock.now_ts += 1.0
    for _ in range(10):
        tracker.record(served(STABLE.key, ttft_s=0.2))
    await loop.tick()
    assert len(await plane.alerts.firing()) == 1  # the 6h rule's 2.5 s window still burns
    clock.now_ts += 3.0
    tracker.record(served(STABLE.key, ttft_s=0.2))
    await loop.tick()
    # The page resolves; the slow-burn rule (3d and 6h: 360 s and 30 s here) still sees
    # the burn, so a ticket takes its place.
    assert [a.severity for a in await plane.alerts.firing()] == ["ticket"]
    for _ in range(3):
        clock.now_ts += 6.0
        await loop.tick()
    assert board.get(SMOLLM2) == SLOActions()
    decisions = [(d.kind, d.decision) for d in reversed(await plane.alerts.decisions(SMOLLM2))]
    assert decisions == [
        ("alert", "fired"),
        ("shed_batch", "on"),
        ("fallback", "on"),
        ("alert", "fired"),  # the ticket
        ("alert", "resolved"),  # the page
        ("fallback", "off"),
        ("shed_batch", "off"),
    ]
    on = (await plane.alerts.decisions(SMOLLM2, ["shed_batch"]))[-1]
    assert on.details["ttft"]["burn_417ms"] == pytest.approx(100.0)
    restarted = SLOLoop(tracker, board, plane, lambda: {}, lambda _: STABLE.key, clock)
    await restarted.start()  # a restart picks up what is still firing
    assert list(restarted.firing.values()) == ["ticket"]


async def test_a_canary_worse_than_stable_is_rolled_back_by_the_system(
    plane: ControlPlane,
) -> None:
    await plane.versions.register_version(SMOLLM2, "slow", f"bundled:{SMOLLM2}", actor="ops")
    await report_loaded(plane, SMOLLM2, "slow")
    record = await plane.deployments.set_canary(
        SMOLLM2, VersionKey(SMOLLM2, "slow"), 50, actor="ops"
    )
    spec = replace(record.spec, slo=SLO)
    canary = f"{SMOLLM2}@slow"
    clock = Clock()
    tracker = SLOTracker(clock)
    tracker.set_targets({SMOLLM2: SLO})
    loop = SLOLoop(
        tracker, ActionBoard(), plane, lambda: {SMOLLM2: spec}, lambda _: STABLE.key, clock
    )
    for _ in range(19):  # not yet enough canary requests to judge it
        tracker.record(served(canary, ttft_s=0.5 if _ % 4 else 3.0))
    for _ in range(40):
        tracker.record(served(STABLE.key, ttft_s=0.5))
    await loop.tick()
    assert (await plane.deployments.get(SMOLLM2)).spec.canary is not None
    tracker.record(served(canary, ttft_s=3.0))
    await loop.tick()
    after = await plane.deployments.get(SMOLLM2)
    assert after.spec.canary is None and after.spec.stable.key == STABLE.key
    [entry, *_] = await plane.audit.list("deployment", SMOLLM2)
    assert (entry.actor, entry.action) == ("system", "deployment.rollback")
    assert entry.after is not None and "missed the ttft SLO" in entry.after["reason"]
    [decision] = await plane.alerts.decisions(SMOLLM2, ["rollback"])
    assert decision.details["canary_requests"] == 20 and decision.details["stable_bad"] == 0.0
    assert decision.details["canary_bad"] == pytest.approx(0.3)


async def test_an_empty_short_window_does_not_end_the_shedding(plane: ControlPlane) -> None:
    """Under shedding few requests are served: a short window with none in it is no
    evidence the burn stopped, so batch shedding holds while the long window burns."""
    clock = Clock()
    tracker, board = SLOTracker(clock), ActionBoard()
    tracker.set_targets({SMOLLM2: SLO})
    spec = DeploymentSpec(SMOLLM2, STABLE, slo=SLO)
    loop = SLOLoop(tracker, board, plane, lambda: {SMOLLM2: spec}, lambda _: STABLE.key, clock)
    for _ in range(20):
        tracker.record(served(STABLE.key, ttft_s=3.0))
    await loop.tick()
    assert board.get(SMOLLM2) == SLOActions(shed_batch=True)
    clock.now_ts += 2.0
    tracker.record(served(STABLE.key, ttft_s=3.0))
    clock.now_ts += 3.5  # nothing served since: both page rules' short windows are empty
    await loop.tick()  # and the hold has passed; the 5 s window still holds the burn
    assert board.get(SMOLLM2) == SLOActions(shed_batch=True)
    clock.now_ts += 5.0  # the long window has emptied: the burn is over
    await loop.tick()
    assert board.get(SMOLLM2) == SLOActions()


async def test_the_fallback_ends_when_the_deployment_is_forecast_to_cope(
    plane: ControlPlane,
) -> None:
    clock = Clock()
    tracker, board = SLOTracker(clock), ActionBoard()
    spec = DeploymentSpec(
        SMOLLM2, STABLE, slo=SLO, fallback=FallbackSpec("lite", FallbackTrigger.QUEUE_WAIT, 9.0)
    )
    tracker.set_targets({SMOLLM2: SLO})
    forecast = {"ttft_p99_s": 3.0}

    async def recover(_: DeploymentSpec) -> Recovery:
        return Recovery(forecast["ttft_p99_s"], offered_rps=4.0, target_s=SLO.ttft_p99_s)

    loop = SLOLoop(
        tracker, board, plane, lambda: {SMOLLM2: spec}, lambda _: STABLE.key, clock, recover
    )
    for _ in range(20):
        tracker.record(served(STABLE.key, ttft_s=3.0))
    await loop.tick()
    clock.now_ts += 5.0
    for _ in range(20):  # still burning a hold later: over to the fallback
        tracker.record(served(STABLE.key, ttft_s=3.0))
    await loop.tick()
    assert board.get(SMOLLM2) == SLOActions(shed_batch=True, fallback=True)
    clock.now_ts += 60.0  # every window empty (its traffic is elsewhere): not enough
    await loop.tick()
    assert board.get(SMOLLM2).fallback
    forecast["ttft_p99_s"] = 0.7  # within 80% of the 1 s target at the load offered
    await loop.tick()
    clock.now_ts += 5.0  # the recovery hold (that of a 1-hour window: 5 s)
    await loop.tick()
    assert board.get(SMOLLM2) == SLOActions(shed_batch=True)
    [off] = [d for d in await plane.alerts.decisions(SMOLLM2, ["fallback"]) if d.decision == "off"]
    assert "forecast a TTFT p99 of 0.7 s" in off.reason and "4 interactive requests/s" in off.reason
    assert off.details["forecast"] == {
        "ttft_p99_s": 0.7,
        "offered_rps": 4.0,
        "target_s": 1.0,
        "recovery_share": 0.8,
    }


async def test_a_shadow_worse_than_stable_is_reported_once_and_left_running(
    plane: ControlPlane,
) -> None:
    shadow = replace(STABLE, version="next")
    spec = DeploymentSpec(SMOLLM2, STABLE, slo=SLO, shadow=shadow, shadow_weight=50)
    clock = Clock()
    tracker = SLOTracker(clock)
    tracker.set_targets({SMOLLM2: SLO})
    loop = SLOLoop(
        tracker, ActionBoard(), plane, lambda: {SMOLLM2: spec}, lambda _: STABLE.key, clock
    )
    for _ in range(40):
        tracker.record(served(STABLE.key, ttft_s=0.5))
    for i in range(20):  # a quarter of its first tokens late
        tracker.record(replace(served(shadow.key, ttft_s=3.0 if i % 4 == 0 else 0.5), shadow=True))
    status = tracker.status(SMOLLM2)
    assert status is not None and status.slis[SLI.TTFT].total == 40  # clients' requests only
    await loop.tick()
    await loop.tick()
    [decision] = await plane.alerts.decisions(SMOLLM2, ["shadow"])
    assert decision.decision == "worse" and decision.details["shadow"] == shadow.key
    assert decision.details["shadow_bad"] == pytest.approx(0.25)
    assert decision.details["shadow_requests"] == 20
    assert not await plane.alerts.firing()  # a shadow's misses page nobody


async def test_a_gateway_that_hands_the_loop_on_switches_its_actions_off(
    plane: ControlPlane,
) -> None:
    """Another gateway owns the loop now: what this one switched on would stay on with
    nothing to switch it off, and its alerts are the new owner's to resolve."""
    clock = Clock()
    tracker, board = SLOTracker(clock), ActionBoard()
    spec = DeploymentSpec(SMOLLM2, STABLE, slo=SLO)
    tracker.set_targets({SMOLLM2: SLO})
    loop = SLOLoop(tracker, board, plane, lambda: {SMOLLM2: spec}, lambda _: STABLE.key, clock)
    for _ in range(50):
        tracker.record(served(STABLE.key, ttft_s=3.0))
    await loop.tick()
    assert board.get(SMOLLM2) == SLOActions(shed_batch=True) and loop.firing
    loop.stand_down()
    assert board.get(SMOLLM2) == SLOActions() and loop.firing == {}
    taken_over = SLOLoop(
        tracker, ActionBoard(), plane, lambda: {SMOLLM2: spec}, lambda _: STABLE.key, clock
    )
    await taken_over.start()
    await taken_over.tick()  # still burning: the page already fires, none is sent again
    assert len(await plane.alerts.firing()) == 1
    fired = [d for d in await plane.alerts.decisions(SMOLLM2) if d.kind == "alert"]
    assert len(fired) == 1


async def owed(plane: ControlPlane) -> list[dict[str, Any]]:
    """Every message written to the outbox, oldest first."""
    async with plane.outbox._sessions() as session:
        rows = (await session.execute(select(OutboxMessage).order_by(OutboxMessage.id))).scalars()
        return [row.payload for row in rows]


async def test_shed_and_fallback_are_each_one_alert_from_on_to_off(plane: ControlPlane) -> None:
    """On-call (or an Alertmanager) sees batch shedding and the fallback as alerts that
    fire while they are on and resolve when they are off: the same labels and fingerprint
    both times, the resolve starting when the firing did and ending when it ended."""
    await plane.webhooks.create("oncall", "https://hooks.example/", ["shed", "fallback"], actor="o")
    clock = Clock()
    tracker, board = SLOTracker(clock), ActionBoard()
    spec = DeploymentSpec(
        SMOLLM2, STABLE, slo=SLO, fallback=FallbackSpec("lite", FallbackTrigger.QUEUE_WAIT, 9.0)
    )
    tracker.set_targets({SMOLLM2: SLO})
    loop = SLOLoop(tracker, board, plane, lambda: {SMOLLM2: spec}, lambda _: STABLE.key, clock)
    for _ in range(50):
        tracker.record(served(STABLE.key, ttft_s=3.0))
    await loop.tick()
    clock.now_ts += 6.0
    for _ in range(MIN_EVENTS):
        tracker.record(served(STABLE.key, ttft_s=3.0))
    await loop.tick()
    for _ in range(4):  # quiet: fallback off, then shedding off
        clock.now_ts += 6.0
        await loop.tick()
    assert board.get(SMOLLM2) == SLOActions()
    messages = await owed(plane)
    by_name: dict[str, list[dict[str, Any]]] = {}
    for m in messages:
        by_name.setdefault(m["labels"]["alertname"], []).append(m)
    assert set(by_name) == {"VigilShedBatch", "VigilFallback"}
    for name, (firing, resolved) in by_name.items():
        assert (firing["status"], resolved["status"]) == ("firing", "resolved"), name
        assert (
            firing["labels"]
            == resolved["labels"]
            == {
                "alertname": name,
                "service": "vigil",
                "deployment": SMOLLM2,
                "severity": "info",
            }
        )
        assert firing["fingerprint"] == resolved["fingerprint"]
        assert resolved["startsAt"] == firing["startsAt"]
        assert firing["endsAt"] == NOT_ENDED and resolved["endsAt"] > resolved["startsAt"]
    kinds = {"VigilShedBatch": "shed_batch", "VigilFallback": "fallback"}
    for name, (_, resolved) in by_name.items():
        [off, on] = [d for d in await plane.alerts.decisions(SMOLLM2, [kinds[name]])]
        assert (on.decision, off.decision) == ("on", "off")
        assert resolved["startsAt"] == on.at.isoformat()
        assert resolved["endsAt"] == off.at.isoformat()


async def test_actions_left_on_by_a_stopped_gateway_are_resolved_when_the_loop_starts(
    plane: ControlPlane,
) -> None:
    """Actions live in the memory of the gateway that runs the loop: one that starts
    afresh has none on, so an alert still firing for one would never resolve."""
    await plane.webhooks.create("oncall", "https://hooks.example/", ["shed"], actor="o")
    clock = Clock()
    tracker, board = SLOTracker(clock), ActionBoard()
    spec = DeploymentSpec(SMOLLM2, STABLE, slo=SLO)
    tracker.set_targets({SMOLLM2: SLO})
    loop = SLOLoop(tracker, board, plane, lambda: {SMOLLM2: spec}, lambda _: STABLE.key, clock)
    await loop.start()
    for _ in range(50):
        tracker.record(served(STABLE.key, ttft_s=3.0))
    await loop.tick()
    await loop.start()  # started again while on: what it switched on stays on
    assert [d.decision for d in await plane.alerts.decisions(SMOLLM2, ["shed_batch"])] == ["on"]
    restarted = SLOLoop(
        SLOTracker(clock), ActionBoard(), plane, lambda: {SMOLLM2: spec}, lambda _: STABLE.key
    )
    await restarted.start()
    [off, on] = await plane.alerts.decisions(SMOLLM2, ["shed_batch"])
    assert (on.decision, off.decision) == ("on", "off")
    firing, resolved = await owed(plane)
    assert (firing["status"], resolved["status"]) == ("firing", "resolved")
    assert firing["fingerprint"] == resolved["fingerprint"]
    assert resolved["startsAt"] == firing["startsAt"]
    await restarted.start()  # nothing left on: nothing more to say
    assert len(await owed(plane)) == 2


def test_a_one_off_decision_keeps_its_own_shape() -> None:
    """A rollback is over when it is told: resolved at once, its decision a label."""
    at = datetime(2026, 12, 1, 12, tzinfo=UTC)
    rollback = DecisionRecord(1, at, "chat", "rollback", "rolled_back", "worse", {})
    alert = rollback.message(None)
    assert alert["status"] == "resolved" and alert["startsAt"] == alert["endsAt"]
    assert alert["labels"]["alertname"] == "VigilRollback"
    assert alert["labels"]["decision"] == "rolled_back"
    on = DecisionRecord(2, at, "chat", "shed_batch", "on", "shedding", {})
    off = DecisionRecord(3, at + timedelta(minutes=5), "chat", "shed_batch", "off", "done", {})
    firing, resolved = on.message(True), off.message(False, starts_at=on.at)
    assert firing["labels"] == resolved["labels"] and "decision" not in firing["labels"]
    assert firing["fingerprint"] == resolved["fingerprint"] != alert["fingerprint"]
    assert (resolved["startsAt"], resolved["endsAt"]) == (at.isoformat(), off.at.isoformat())
