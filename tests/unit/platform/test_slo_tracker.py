"""SLIs read from each request's record and each admission verdict on an interactive
request, and a deployment's budget and burn rates from their counts, per version and all
versions together; on a clock the test holds."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from vigil.engine.request import Priority, RequestClock
from vigil.platform.control.specs import SLOTargets
from vigil.platform.slo.burn import Severity
from vigil.platform.slo.sli import ALERTING, SLI, classify, objective
from vigil.platform.slo.tracker import SLOTracker
from vigil.platform.telemetry.live import LiveSeries
from vigil.platform.telemetry.metrics import Metrics
from vigil.platform.telemetry.recorder import Outcome, RequestRecord, RequestRecorder

SLO = SLOTargets(ttft_p99_s=1.0, min_tokens_per_s=10.0, availability_target=0.99, window_s=720.0)


def record(
    outcome: Outcome = Outcome.LENGTH,
    ttft_s: float | None = 0.5,
    tokens: int = 11,
    decode_s: float = 0.5,
    version: str = "m@1",
) -> RequestRecord:
    clock = RequestClock(100.0)
    if ttft_s is not None:
        clock.first_token_ts = 100.0 + ttft_s
        clock.last_token_ts = clock.first_token_ts + decode_s
    clock.finished_ts = (clock.last_token_ts or 100.0) + 0.01
    return RequestRecord("chat", version, Priority.INTERACTIVE, outcome, 10, tokens, clock)


def test_a_request_counts_toward_the_slis_its_clock_speaks_for() -> None:
    assert classify(record(), SLO) == {
        SLI.TTFT: True,
        SLI.TOKENS_PER_S: True,  # 10 tokens after the first in 0.5 s: 20/s
        SLI.AVAILABILITY: True,
    }
    slow = classify(record(ttft_s=1.5, decode_s=2.0), SLO)
    assert (slow[SLI.TTFT], slow[SLI.TOKENS_PER_S]) == (False, False)  # 5 tokens/s
    assert classify(record(ttft_s=1.0), SLO)[SLI.TTFT] is True  # at the target is in
    one_token = classify(record(tokens=1), SLO)
    assert SLI.TOKENS_PER_S not in one_token  # no decode speed to speak of
    assert classify(record(Outcome.TIMED_OUT, ttft_s=None, tokens=0), SLO) == {
        SLI.TTFT: False,
        SLI.AVAILABILITY: False,
    }
    assert classify(record(Outcome.ERROR, ttft_s=None, tokens=0), SLO) == {SLI.AVAILABILITY: False}
    assert classify(record(Outcome.ABORT, ttft_s=None, tokens=0), SLO) == {}


class Clock:
    def __init__(self) -> None:
        self.now_ts = 1000.0

    def __call__(self) -> float:
        return self.now_ts


def test_budget_and_burn_rates_per_deployment_and_counts_per_version() -> None:
    clock = Clock()
    tracker = SLOTracker(clock)
    tracker.set_targets({"chat": SLO})
    for _ in range(90):
        tracker.record(record())
    for _ in range(10):
        tracker.record(record(ttft_s=3.0, version="m@canary"))  # every canary request late
    status = tracker.status("chat")
    assert status is not None
    ttft = status.slis[SLI.TTFT]
    # 10 bad of 100 at a 99% objective: 10 times the budget, all spent and overspent.
    assert (ttft.good, ttft.total, ttft.objective) == (90, 100, 0.99)
    assert ttft.budget_remaining == pytest.approx(-9.0)
    # A 720 s SLO window scales the workbook's 5 minutes to 83 ms, and says so.
    assert ttft.burn_rates["83ms"] == pytest.approx(10.0)  # every window holds them all
    assert set(ttft.burn_rates) == {"1s", "83ms", "6s", "500ms", "1m12s"}
    # 10 is under the first page rule's 14.4 and over the second's 6: a page, by the
    # rule whose long window is the workbook's 6 h (6 s here).
    assert ttft.severity is Severity.PAGE and ttft.rule is not None
    assert ttft.rule.name == "6s"
    assert status.versions["m@canary"][SLI.TTFT] == (0, 10)
    assert status.versions["m@1"][SLI.TTFT] == (90, 90)
    tracker.admission("chat", "m@1", admitted=False, priority=Priority.INTERACTIVE)
    assert tracker.status("chat").slis[SLI.SHED].total == 1  # type: ignore[union-attr]


def test_shedding_interactive_requests_burns_the_admission_target() -> None:
    """The shed SLI has its own objective and alerts like the others; it counts
    interactive requests only (batch is shed first on purpose), and a request sent to
    the fallback deployment was admitted for the one it asked for."""
    slo = SLOTargets(window_s=720.0, admission_target=0.95)
    assert SLI.SHED in ALERTING and objective(SLI.SHED, slo) == 0.95
    assert objective(SLI.SHED, SLOTargets()) == 0.99  # the default: at most 1% shed
    clock = Clock()
    tracker = SLOTracker(clock)
    tracker.set_targets({"chat": slo, "lite": slo})
    recorder = RequestRecorder(Metrics(CollectorRegistry()), LiveSeries(), tracker)
    for _ in range(50):
        recorder.admission("chat", "m@1", "shed", "slo_burn", Priority.BATCH)
    status = tracker.status("chat")
    assert status is not None and status.slis[SLI.SHED].total == 0
    for _ in range(17):
        recorder.admission("chat", "m@1", "admitted", "ok", Priority.INTERACTIVE)
    for _ in range(3):
        recorder.admission("chat", "m@1", "shed", "queue_full", Priority.INTERACTIVE)
    shed = tracker.status("chat").slis[SLI.SHED]  # type: ignore[union-attr]
    # 3 of 20 shed against a budget of 5%: a burn of 3 over every window, a ticket.
    assert (shed.good, shed.total, shed.objective) == (17, 20, 0.95)
    assert shed.burn_rates["1s"] == pytest.approx(3.0) and shed.severity is Severity.TICKET
    for _ in range(60):  # 63 of 80 shed: a burn of 15.75, over the fast page's 14.4
        recorder.admission("chat", "m@1", "shed", "queue_full", Priority.INTERACTIVE)
    shed = tracker.status("chat").slis[SLI.SHED]  # type: ignore[union-attr]
    assert shed.severity is Severity.PAGE and shed.rule is not None and shed.rule.name == "1s"
    for _ in range(10):  # sent to lite, which admits them: admitted for both
        recorder.admission("chat", "m@1", "fallback", "slo_burn", Priority.INTERACTIVE)
        recorder.admission("lite", "m@2", "admitted", "ok", Priority.INTERACTIVE)
    assert tracker.status("chat").slis[SLI.SHED].good == 27  # type: ignore[union-attr]
    assert tracker.status("lite").slis[SLI.SHED].good == 10  # type: ignore[union-attr]


def test_an_slo_change_starts_counting_afresh_and_unknown_deployments_are_ignored() -> None:
    tracker = SLOTracker(Clock())
    tracker.set_targets({"chat": SLO})
    tracker.record(record())
    tracker.record(
        RequestRecord("other", "m@1", Priority.BATCH, Outcome.LENGTH, 1, 1, RequestClock(0.0))
    )
    tracker.set_targets({"chat": SLO})  # the same SLO: counts kept
    assert tracker.status("chat").slis[SLI.AVAILABILITY].total == 1  # type: ignore[union-attr]
    tracker.set_targets({"chat": SLOTargets(ttft_p99_s=2.0, window_s=720.0)})
    assert tracker.status("chat").slis[SLI.AVAILABILITY].total == 0  # type: ignore[union-attr]
    assert tracker.status("other") is None


def test_a_spent_budget_says_since_when_and_by_how_much_bounded_at_zero() -> None:
    clock = Clock()
    tracker = SLOTracker(clock)
    tracker.set_targets({"chat": SLO})
    for _ in range(90):
        tracker.record(record())
    first = tracker.status("chat").slis[SLI.TTFT]  # type: ignore[union-attr]
    assert first.exhausted_for_s is None and first.budget_left == 1.0
    for _ in range(10):
        tracker.record(record(ttft_s=3.0))
    spent = tracker.status("chat").slis[SLI.TTFT]  # type: ignore[union-attr]
    assert spent.exhausted_for_s == 0.0 and spent.budget_left == 0.0
    assert spent.overspent == pytest.approx(10.0)  # ten times the budget's errors
    clock.now_ts += 30.0
    later = tracker.status("chat").slis[SLI.TTFT]  # type: ignore[union-attr]
    assert later.exhausted_for_s == pytest.approx(30.0)  # from when it was first seen
    for _ in range(2000):  # good requests bring the bad share under the budget again
        tracker.record(record())
    recovered = tracker.status("chat").slis[SLI.TTFT]  # type: ignore[union-attr]
    assert recovered.exhausted_for_s is None and recovered.overspent is None
    assert 0 < recovered.budget_left < 1
