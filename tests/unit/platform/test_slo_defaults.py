"""A deployment left at the default SLO, under a 30 s burst of bad requests: the SLO loop
over a real control plane (SQLite) and the real tracker, fed through the recorder as the
gateway feeds it, on a clock the test steps through the hour before, the burst and the
hours after. Each alert fires at most once (no flapping), and all are resolved after;
a handful of bad requests pages nobody."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import select

from vigil.engine.bundled import SMOLLM2
from vigil.engine.request import Priority, RequestClock
from vigil.platform.control.db import create_engine, session_factory
from vigil.platform.control.migrate import migrate
from vigil.platform.control.plane import ControlPlane
from vigil.platform.control.specs import DEFAULT_WINDOW_S, DeploymentSpec, SLOTargets
from vigil.platform.control.webhooks.tables import OutboxMessage
from vigil.platform.slo.actions import ActionBoard, SLOActions
from vigil.platform.slo.loop import SLOLoop
from vigil.platform.slo.tracker import SLOTracker
from vigil.platform.telemetry.live import LiveSeries
from vigil.platform.telemetry.metrics import Metrics
from vigil.platform.telemetry.recorder import Outcome, RequestRecord, RequestRecorder

HOUR = 3600.0
EVENTS = ["slo.burn", "slo.recovered", "shed", "fallback", "canary.rollback"]


class Clock:
    def __init__(self) -> None:
        self.now_ts = 100_000.0

    def __call__(self) -> float:
        return self.now_ts


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'vigil.db'}"
    await asyncio.to_thread(migrate, url)
    engine = create_engine(url)
    plane = ControlPlane(session_factory(engine))
    await plane.seed_bundled([SMOLLM2])  # deployed with the default SLO
    await plane.webhooks.create("oncall", "https://hooks.example/", EVENTS, actor="ops")
    yield plane
    await engine.dispose()


class Traffic:
    """The gateway's side: admission verdicts and ended requests into the recorder."""

    def __init__(self, spec: DeploymentSpec, clock: Clock, tracker: SLOTracker) -> None:
        self.spec, self.clock = spec, clock
        self.recorder = RequestRecorder(Metrics(CollectorRegistry()), LiveSeries(), tracker)

    def served(self, ttft_s: float, priority: Priority = Priority.INTERACTIVE) -> None:
        version = self.spec.stable.key
        self.recorder.admission(self.spec.name, version, "admitted", "ok", priority)
        now = self.clock()
        clock = RequestClock(now - ttft_s - 2.0, first_token_ts=now - 2.0, last_token_ts=now)
        clock.finished_ts = now
        record = RequestRecord(self.spec.name, version, priority, Outcome.LENGTH, 20, 64, clock)
        self.recorder.ended(record)

    def shed(self, priority: Priority) -> None:
        version = self.spec.stable.key
        self.recorder.admission(self.spec.name, version, "shed", "slo_ttft", priority)


async def owed(plane: ControlPlane) -> list[dict[str, Any]]:
    async with plane.outbox._sessions() as session:
        rows = (await session.execute(select(OutboxMessage).order_by(OutboxMessage.id))).scalars()
        return [row.payload for row in rows]


def fired_per_alert(messages: list[dict[str, Any]]) -> Counter[tuple[str, ...]]:
    return Counter(
        (m["labels"]["alertname"], m["labels"].get("sli", ""), m["labels"]["severity"])
        for m in messages
        if m["status"] == "firing"
    )


def _poisson(rng: random.Random, per_s: float, seconds: float) -> list[float]:
    """Arrival times (from 0) of a Poisson process over `seconds`."""
    times, t = [], rng.expovariate(per_s)
    while t < seconds:
        times.append(t)
        t += rng.expovariate(per_s)
    return times


async def _run(plane: ControlPlane) -> tuple[SLOLoop, ActionBoard, Traffic, Clock]:
    [record] = await plane.deployments.list()
    spec = record.spec
    clock = Clock()
    tracker, board = SLOTracker(clock), ActionBoard()
    tracker.set_targets({spec.name: spec.slo})
    loop = SLOLoop(tracker, board, plane, lambda: {spec.name: spec}, lambda s: s.stable.key, clock)
    await loop.start()
    return loop, board, Traffic(spec, clock, tracker), clock


async def test_a_30_s_burst_on_the_default_slo_fires_each_alert_at_most_once(
    plane: ControlPlane,
) -> None:
    [record] = await plane.deployments.list()
    assert record.spec.slo == SLOTargets() and record.spec.slo.window_s == DEFAULT_WINDOW_S
    loop, board, traffic, clock = await _run(plane)

    async def quiet(seconds: float, step_s: float) -> None:
        """One good interactive request every 20 s; the loop ticks every step_s."""
        end = clock.now_ts + seconds
        while clock.now_ts < end:
            clock.now_ts += step_s
            if int(clock.now_ts) % 20 < step_s:
                traffic.served(ttft_s=0.5)
            await loop.tick()

    await quiet(HOUR, 5.0)
    # The burst, as 40 streams of 64 tokens on 8 batch slots feel it: at random moments,
    # 12 interactive requests a second shed and 2 batch ones; the admitted ones end 8 at a
    # time as each batch finishes, every 8 s until the queue has drained, their first
    # token late. The loop ticks once a second, as it does in Vigil.
    rng = random.Random(7)
    start = clock.now_ts
    arrivals = [(start + t, "shed") for t in _poisson(rng, 12.0, 30.0)]
    arrivals += [(start + t, "batch") for t in _poisson(rng, 2.0, 30.0)]
    arrivals += [(start + t + 0.01 * i, "late") for t in (7.5, 15.5, 23.5, 31.5) for i in range(8)]
    next_tick = start + 1.0
    for at, kind in [*sorted(arrivals), (start + 40.0, "end")]:
        while next_tick <= at:
            clock.now_ts = next_tick
            await loop.tick()
            next_tick += 1.0
        clock.now_ts = at
        if kind == "shed":
            traffic.shed(Priority.INTERACTIVE)
        elif kind == "late":
            traffic.served(ttft_s=8.0)
        elif kind == "batch":
            traffic.shed(Priority.BATCH)
    await quiet(600.0, 1.0)
    await quiet(8 * HOUR, 5.0)

    messages = await owed(plane)
    fired = fired_per_alert(messages)
    # The burst is seen: shedding most interactive requests and the late first tokens
    # of the rest page, and batch shedding is an alert of its own while it lasts.
    assert fired[("VigilSLOBurn", "ttft", "page")] == 1, fired
    assert fired[("VigilSLOBurn", "shed", "page")] == 1, fired
    assert fired[("VigilShedBatch", "", "info")] == 1, fired
    assert max(fired.values()) == 1, fired  # and nothing fires twice
    per_fingerprint = Counter(m["fingerprint"] for m in messages if m["status"] == "firing")
    assert max(per_fingerprint.values()) == 1, per_fingerprint
    resolved = Counter(m["fingerprint"] for m in messages if m["status"] == "resolved")
    assert resolved == per_fingerprint  # each resolved once, hours later
    assert not await plane.alerts.firing() and board.get(SMOLLM2) == SLOActions()


async def test_a_handful_of_bad_requests_pages_nobody(plane: ControlPlane) -> None:
    loop, board, traffic, clock = await _run(plane)
    for _ in range(5):
        traffic.served(ttft_s=30.0)  # every one of them late, on a deployment idle before
    await loop.tick()
    assert not await plane.alerts.firing() and board.get(SMOLLM2) == SLOActions()
    for _ in range(5):
        clock.now_ts += 1.0
        traffic.served(ttft_s=30.0)
    await loop.tick()  # ten now: a fast burn with enough requests to say so
    [alert] = await plane.alerts.firing()
    assert (alert.sli, alert.severity) == ("ttft", "page")
    assert alert.summary.endswith("in both the last 1 h and the last 5 min")
