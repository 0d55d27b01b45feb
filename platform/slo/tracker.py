"""Good/total counts of every SLI, per deployment and per model version, and what they
say about each deployment's error budget and burn rates.

The recorder hands every ended request's record here, and admission every verdict (the
shed SLI counts interactive requests only); the counts go into time buckets
(slo/windows.py) sized by each deployment's SLO window, so that memory is bounded by the
number of deployments and versions, not of requests.
`status` is read once a second by the SLO loop and at scrape time by /metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from vigil.engine.request import Priority
from vigil.platform.control.specs import SLOTargets
from vigil.platform.slo.burn import (
    ScaledRule,
    Severity,
    budget_remaining,
    evaluate,
    scaled_rules,
)
from vigil.platform.slo.sli import SLI, classify, counts_admission, objective
from vigil.platform.slo.windows import WindowSet
from vigil.platform.telemetry.recorder import RequestRecord

ALL_VERSIONS = "*"  # the counts of a deployment's versions together


@dataclass(frozen=True, slots=True)
class SLIStatus:
    sli: SLI
    objective: float
    good: int  # over the SLO window
    total: int
    budget_remaining: float  # 1 untouched, 0 spent, below 0 overspent
    burn_rates: dict[str, float | None]  # window by its real length ("1h", "5s") -> burn
    severity: Severity | None  # the alert the burn calls for
    rule: ScaledRule | None  # the rule that calls for it
    exhausted_for_s: float | None = None  # how long the budget has been spent; None: not

    @property
    def budget_left(self) -> float:
        """The share of the budget left, bounded to 0-1 for people: overspent is 0, and
        `overspent` says by how much."""
        return min(1.0, max(0.0, self.budget_remaining))

    @property
    def overspent(self) -> float | None:
        """Errors over the window as a multiple of the budget, once it is spent."""
        return 1.0 - self.budget_remaining if self.budget_remaining <= 0 else None


@dataclass(frozen=True, slots=True)
class DeploymentSLO:
    deployment: str
    slo: SLOTargets
    slis: dict[SLI, SLIStatus]  # every version together
    versions: dict[str, dict[SLI, tuple[int, int]]]  # model@version -> (good, total)


class _Deployment:
    def __init__(self, slo: SLOTargets) -> None:
        self.slo = slo
        self.rules = scaled_rules(slo.window_s)
        self.windows_s = [slo.window_s, *(s for r in self.rules for _, s in r.windows)]
        self.counts: dict[tuple[str, SLI], WindowSet] = {}
        self.events: dict[tuple[SLI, bool], int] = {}  # ever, for Prometheus's own windows
        self.exhausted_since: dict[SLI, float] = {}  # clock ts the budget was seen spent

    def add(self, version: str, sli: SLI, good: bool, now_ts: float, shadow: bool = False) -> None:
        """Every version together over every window the rules read; each version alone
        over the SLO's window only (canary and shadow verdicts read no other). A shadow's
        events count under its version only: no client saw them."""
        keys = [(version, sli)]
        if not shadow:
            self.events[(sli, good)] = self.events.get((sli, good), 0) + 1
            keys.append((ALL_VERSIONS, sli))
        for key in keys:
            counts = self.counts.get(key)
            if counts is None:
                windows = self.windows_s if key[0] == ALL_VERSIONS else [self.slo.window_s]
                counts = self.counts[key] = WindowSet(windows)
            counts.add(now_ts, good)


class SLOTracker:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._deployments: dict[str, _Deployment] = {}

    def set_targets(self, targets: dict[str, SLOTargets]) -> None:
        """The deployments and their SLOs now. A deployment whose SLO changed starts
        counting afresh (its windows may differ); one that is gone is forgotten."""
        kept = {}
        for name, slo in targets.items():
            known = self._deployments.get(name)
            kept[name] = known if known is not None and known.slo == slo else _Deployment(slo)
        self._deployments = kept

    def record(self, record: RequestRecord) -> None:
        d = self._deployments.get(record.deployment)
        if d is None:
            return
        now = self._clock()
        for sli, good in classify(record, d.slo).items():
            d.add(record.version, sli, good, now, record.shadow)

    def admission(self, deployment: str, version: str, admitted: bool, priority: Priority) -> None:
        """A verdict on a request for `deployment`: admitted (there, or sent to its
        fallback) or shed."""
        d = self._deployments.get(deployment)
        if d is not None and counts_admission(priority):
            d.add(version, SLI.SHED, admitted, self._clock())

    def deployments(self) -> list[str]:
        return list(self._deployments)

    def events(self) -> list[tuple[str, SLI, bool, int, float]]:
        """(deployment, SLI, good, count since start, objective): what Prometheus needs
        to compute the same burn rates over its own windows."""
        return [
            (name, sli, good, n, objective(sli, d.slo))
            for name, d in self._deployments.items()
            for (sli, good), n in d.events.items()
        ]

    def status(self, deployment: str) -> DeploymentSLO | None:
        d = self._deployments.get(deployment)
        if d is None:
            return None
        now = self._clock()
        slis = {sli: self._sli_status(d, sli, now) for sli in SLI}
        versions: dict[str, dict[SLI, tuple[int, int]]] = {}
        for (version, sli), counts in d.counts.items():
            if version != ALL_VERSIONS:
                versions.setdefault(version, {})[sli] = counts.counts(now, d.slo.window_s)
        return DeploymentSLO(deployment, d.slo, slis, versions)

    def _sli_status(self, d: _Deployment, sli: SLI, now: float) -> SLIStatus:
        goal = objective(sli, d.slo)
        counts = d.counts.get((ALL_VERSIONS, sli)) or WindowSet(d.windows_s)
        verdict = evaluate(lambda window_s: counts.counts(now, window_s), goal, d.rules)
        rates = {name: verdict.rates[seconds] for rule in d.rules for name, seconds in rule.windows}
        good, total = counts.counts(now, d.slo.window_s)
        remaining = budget_remaining(good, total, goal)
        # When the budget was first seen spent, for "exhausted since": read once a second
        # by the SLO loop, so the moment is known to that second on the loop's gateway.
        if remaining <= 0:
            d.exhausted_since.setdefault(sli, now)
        else:
            d.exhausted_since.pop(sli, None)
        since = d.exhausted_since.get(sli)
        return SLIStatus(
            sli,
            goal,
            good,
            total,
            remaining,
            rates,
            verdict.severity,
            verdict.rule,
            None if since is None else now - since,
        )
