"""Series that dashboards and rules read exist before anything happens to them: every
outcome of a version from its first request, and each deployment's TTFT target."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from vigil.engine.request import Priority
from vigil.platform.control.specs import SLOTargets
from vigil.platform.slo.metrics import SLOCollector
from vigil.platform.slo.tracker import SLOTracker
from vigil.platform.telemetry.live import LiveSeries
from vigil.platform.telemetry.metrics import Metrics
from vigil.platform.telemetry.recorder import Outcome, RequestRecorder


def test_every_outcome_of_a_version_is_zero_from_its_first_admission() -> None:
    registry = CollectorRegistry()
    recorder = RequestRecorder(Metrics(registry), LiveSeries())
    recorder.admission("chat", "m@1", "admitted", "ok", Priority.INTERACTIVE)
    recorder.admission("chat", "m@1", "shed", "queue_full", Priority.INTERACTIVE)
    for outcome in Outcome:
        labels = {"deployment": "chat", "version": "m@1", "outcome": outcome.value}
        expected = 1.0 if outcome is Outcome.SHED else 0.0
        assert registry.get_sample_value("vigil_requests_total", labels) == expected, outcome
    assert (
        registry.get_sample_value(
            "vigil_requests_total", {"deployment": "chat", "version": "m@2", "outcome": "stop"}
        )
        is None
    )  # a version no request went to has no series


def test_each_deployment_s_ttft_target_is_a_series() -> None:
    tracker = SLOTracker(clock=lambda: 1000.0)
    tracker.set_targets({"chat": SLOTargets(ttft_p99_s=0.25), "batch": SLOTargets()})
    registry = CollectorRegistry()
    registry.register(SLOCollector(tracker))
    target = "vigil_slo_ttft_target_seconds"
    assert registry.get_sample_value(target, {"deployment": "chat"}) == 0.25
    assert registry.get_sample_value(target, {"deployment": "batch"}) == SLOTargets().ttft_p99_s


def test_an_sli_counts_its_bad_requests_at_zero_before_the_first() -> None:
    tracker = SLOTracker(clock=lambda: 1000.0)
    tracker.set_targets({"chat": SLOTargets()})
    tracker.admission("chat", "m@1", admitted=True, priority=Priority.INTERACTIVE)
    registry = CollectorRegistry()
    registry.register(SLOCollector(tracker))
    events = "vigil_slo_events_total"
    shed = {"deployment": "chat", "sli": "shed"}
    assert registry.get_sample_value(events, {**shed, "result": "good"}) == 1
    assert registry.get_sample_value(events, {**shed, "result": "bad"}) == 0
    ttft = {"deployment": "chat", "sli": "ttft", "result": "bad"}
    assert registry.get_sample_value(events, ttft) is None  # no request counted there yet


def test_a_burn_rates_window_label_is_the_windows_real_length() -> None:
    """A 1-hour SLO window scales the workbook's 1 h and 5 min to 5 s and 417 ms: the
    labels say 5s and 417ms, not the names of the windows they were scaled from."""
    tracker = SLOTracker(clock=lambda: 1000.0)
    tracker.set_targets({"chat": SLOTargets(), "drill": SLOTargets(window_s=3600.0)})
    for name in ("chat", "drill"):
        tracker.admission(name, "m@1", admitted=False, priority=Priority.INTERACTIVE)
    registry = CollectorRegistry()
    registry.register(SLOCollector(tracker))
    windows = {
        (s.labels["deployment"], s.labels["window"])
        for metric in registry.collect()
        if metric.name == "vigil_slo_burn_rate"
        for s in metric.samples
    }
    assert {w for d, w in windows if d == "chat"} == {"1h", "5m", "6h", "30m", "3d"}
    assert {w for d, w in windows if d == "drill"} == {"5s", "417ms", "30s", "2s500ms", "6m"}
