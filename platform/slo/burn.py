"""Error budgets and burn rates: the multiwindow, multi-burn-rate alerts of Google's SRE
workbook, as pure functions of good/total counts.

An SLI's objective (0.99 for a p99 target) leaves an error budget of 1 - objective of
its requests. The burn rate over a window is the share of bad requests there divided by
that budget: 1 spends the budget exactly over the SLO's window, 14.4 spends a 30-day
budget in about two days. An alert needs a long window and a short one both over its
threshold: the long one proves the burn is significant, the short one that it is still
going on, so an alert resolves soon after the burn stops. The workbook's windows are
for a 30-day SLO window; they scale with the SLO's own `window_s`.

    severity  long window  short window  burn rate over both
    page      1 h          5 min         14.4
    page      6 h          30 min        6
    ticket    3 d          6 h           1
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

REFERENCE_WINDOW_S = 30 * 86400.0  # the SLO window the workbook's windows are given for


class Severity(StrEnum):
    PAGE = "page"
    TICKET = "ticket"


@dataclass(frozen=True, slots=True)
class BurnRule:
    severity: Severity
    long_s: float
    short_s: float
    threshold: float

    @property
    def name(self) -> str:
        """How the rule is labelled: its long window in the workbook's terms."""
        return WINDOW_NAMES[self.long_s]


WORKBOOK_RULES = (
    BurnRule(Severity.PAGE, 3600.0, 300.0, 14.4),
    BurnRule(Severity.PAGE, 6 * 3600.0, 1800.0, 6.0),
    BurnRule(Severity.TICKET, 3 * 86400.0, 6 * 3600.0, 1.0),
)
# Windows are labelled by the workbook's names even when scaled to a shorter SLO window.
WINDOW_NAMES = {300.0: "5m", 1800.0: "30m", 3600.0: "1h", 21600.0: "6h", 259200.0: "3d"}


@dataclass(frozen=True, slots=True)
class ScaledRule:
    rule: BurnRule  # as the workbook gives it (names and thresholds)
    long_s: float  # scaled to the SLO's window
    short_s: float

    @property
    def windows(self) -> tuple[tuple[str, float], tuple[str, float]]:
        """(name, seconds) of the long and the short window."""
        return (
            (WINDOW_NAMES[self.rule.long_s], self.long_s),
            (WINDOW_NAMES[self.rule.short_s], self.short_s),
        )


def scaled_rules(window_s: float) -> tuple[ScaledRule, ...]:
    factor = window_s / REFERENCE_WINDOW_S
    return tuple(ScaledRule(r, r.long_s * factor, r.short_s * factor) for r in WORKBOOK_RULES)


def burn_rate(good: int, total: int, objective: float) -> float | None:
    """None for an empty window: no requests, no evidence either way."""
    assert 0.0 < objective < 1.0, f"objective {objective} not in (0, 1)"
    if total == 0:
        return None
    return ((total - good) / total) / (1.0 - objective)


def budget_remaining(good: int, total: int, objective: float) -> float:
    """The share of the error budget left over the SLO's window: 1 untouched, 0 spent,
    below 0 overspent."""
    rate = burn_rate(good, total, objective)
    return 1.0 if rate is None else 1.0 - rate


Counts = Callable[[float], tuple[int, int]]  # window_s -> (good, total) over it, up to now


@dataclass(frozen=True, slots=True)
class BurnVerdict:
    severity: Severity | None  # the worst rule whose windows both burn; None: no alert
    rule: ScaledRule | None  # that rule
    rates: dict[float, float | None]  # window_s -> burn rate, for every window looked at


def evaluate(counts: Counts, objective: float, rules: Sequence[ScaledRule]) -> BurnVerdict:
    """The worst alert the counts call for, and every window's burn rate."""
    rates: dict[float, float | None] = {}
    for r in rules:
        for window_s in (r.long_s, r.short_s):
            if window_s not in rates:
                rates[window_s] = burn_rate(*counts(window_s), objective)
    for r in rules:  # pages first: the rules are ordered by severity
        long, short = rates[r.long_s], rates[r.short_s]
        threshold = r.rule.threshold
        if long is not None and short is not None and long > threshold and short > threshold:
            return BurnVerdict(r.rule.severity, r, rates)
    return BurnVerdict(None, None, rates)
