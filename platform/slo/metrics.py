"""The SLOs on /metrics, read from the tracker at scrape time:
`vigil_slo_error_budget_remaining_ratio{deployment,sli}` and
`vigil_slo_burn_rate{deployment,sli,window}` (each window by its real length, as
Prometheus writes durations: 1h and 5m for a 30-day SLO, 5s and 417ms for a 1-hour one),
and the TTFT target that dashboards draw the percentiles against."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from vigil.platform.slo.tracker import SLOTracker


class SLOCollector(Collector):
    def __init__(self, tracker: SLOTracker) -> None:
        self._tracker = tracker

    def collect(self) -> Iterator[Metric]:
        budget = GaugeMetricFamily(
            "vigil_slo_error_budget_remaining_ratio",
            "Share of the SLO window's error budget left: 1 untouched, 0 spent, below 0 overspent.",
            labels=["deployment", "sli"],
        )
        burn = GaugeMetricFamily(
            "vigil_slo_burn_rate",
            "Bad share over the window divided by the error budget's share (1: the budget "
            "lasts exactly the SLO window). Absent for a window without requests.",
            labels=["deployment", "sli", "window"],
        )
        events = CounterMetricFamily(
            "vigil_slo_events",
            "Requests counted toward each SLI, good or bad (the rules in ops/prometheus "
            "compute burn rates from these).",
            labels=["deployment", "sli", "result"],
        )
        goal = GaugeMetricFamily(
            "vigil_slo_objective_ratio",
            "The share of an SLI's requests that must be good (0.99 for a p99 target).",
            labels=["deployment", "sli"],
        )
        ttft_target = GaugeMetricFamily(
            "vigil_slo_ttft_target_seconds",
            "The SLO's target for the time to first token (ttft_p99_s): 99% of requests within.",
            labels=["deployment"],
        )
        objectives: dict[tuple[str, str], float] = {}
        counts: dict[tuple[str, str, str], int] = {}
        for name, sli, good, n, objective in self._tracker.events():
            # Both results of an SLI from its first request: the rules' error ratio is
            # then 0 while nothing is bad, not absent.
            counts.setdefault((name, sli.value, "good"), 0)
            counts.setdefault((name, sli.value, "bad"), 0)
            counts[(name, sli.value, "good" if good else "bad")] = n
            objectives[(name, sli.value)] = objective
        for event, n in counts.items():
            events.add_metric(list(event), n)
        for labels, objective in objectives.items():
            goal.add_metric(list(labels), objective)
        yield events
        yield goal
        for name in self._tracker.deployments():
            status = self._tracker.status(name)
            if status is None:
                continue
            ttft_target.add_metric([name], status.slo.ttft_p99_s)
            for sli, s in status.slis.items():
                budget.add_metric([name, sli.value], s.budget_remaining)
                for window, rate in s.burn_rates.items():
                    if rate is not None:
                        burn.add_metric([name, sli.value, window], rate)
        yield ttft_target
        yield budget
        yield burn


class AlertsCollector(Collector):
    """`vigil_alerts_firing{severity}`: the SLO loop's alerts firing now."""

    def __init__(self, firing: Callable[[], Mapping[str, str]]) -> None:
        self._firing = firing  # fingerprint -> severity

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(
            "vigil_alerts_firing", "SLO alerts firing now, by severity.", labels=["severity"]
        )
        counts = Counter(self._firing().values())
        for severity in ("page", "ticket"):
            gauge.add_metric([severity], counts.get(severity, 0))
        yield gauge
