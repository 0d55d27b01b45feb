"""Error budgets and burn rates: the multiwindow, multi-burn-rate alerts of Google's SRE
workbook, as pure functions of good/total counts.

An SLI's objective (0.99 for a p99 target) leaves an error budget of 1 - objective of
its requests. The burn rate over a window is the share of bad requests there divided by
that budget: 1 spends the budget exactly over the SLO's window, 14.4 spends a 30-day
budget in about two days. An alert needs a long window and a short one both over its
threshold: the long one proves the burn is significant, the short one that it is still
going on, so an alert resolves soon after the burn stops. The workbook's windows are
for a 30-day SLO window (Vigil's default); they scale with the SLO's own `window_s`, and
are named by their real length (a 1-hour SLO window pages on 5s and 417ms, and says so).

    severity  long window  short window  burn rate over both
    page      1 h          5 min         14.4
    page      6 h          30 min        6
    ticket    3 d          6 h           1

A rule also needs MIN_EVENTS requests in its short window: a burn rate read from a
handful of requests says more about the count than about the service.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

REFERENCE_WINDOW_S = 30 * 86400.0  # the SLO window the workbook's windows are given for

# Fewer requests than this in a rule's short window: no page or ticket from it. Below 10,
# one bad request is over a tenth of the window, a burn of 10x on its own for a 99%
# objective; from 10 on, the fast page of a 99% objective (over 14.4% bad) needs two
# bad requests, never a single one. Ten requests in the default page's 5-minute window
# is two a minute, well under what a deployment worth paging for serves.
MIN_EVENTS = 10

_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1))


class Severity(StrEnum):
    PAGE = "page"
    TICKET = "ticket"


@dataclass(frozen=True, slots=True)
class BurnRule:
    severity: Severity
    long_s: float
    short_s: float
    threshold: float


WORKBOOK_RULES = (
    BurnRule(Severity.PAGE, 3600.0, 300.0, 14.4),
    BurnRule(Severity.PAGE, 6 * 3600.0, 1800.0, 6.0),
    BurnRule(Severity.TICKET, 3 * 86400.0, 6 * 3600.0, 1.0),
)


def _parts(seconds: float) -> list[tuple[int, str]]:
    """The duration in whole units, largest first, to the millisecond."""
    left_ms, parts = round(seconds * 1000), []
    for unit, size_ms in _UNITS:
        n, left_ms = divmod(left_ms, size_ms)
        if n:
            parts.append((n, unit))
    return parts or [(0, "ms")]


def duration_name(seconds: float) -> str:
    """A window's name as Prometheus writes a duration: 5m, 1h, 5s, 417ms, 2s500ms."""
    return "".join(f"{n}{unit}" for n, unit in _parts(seconds))


def duration_words(seconds: float) -> str:
    """The same for people: 5 min, 1 h, 2 s 500 ms."""
    return " ".join(f"{n} {'min' if unit == 'm' else unit}" for n, unit in _parts(seconds))


@dataclass(frozen=True, slots=True)
class ScaledRule:
    rule: BurnRule  # as the workbook gives it (severity and threshold)
    long_s: float  # scaled to the SLO's window
    short_s: float

    @property
    def name(self) -> str:
        """Its long window's real length, e.g. "1h" (or "5s" in a 1-hour SLO window)."""
        return duration_name(self.long_s)

    @property
    def windows(self) -> tuple[tuple[str, float], tuple[str, float]]:
        """(name, seconds) of the long and the short window."""
        return (
            (duration_name(self.long_s), self.long_s),
            (duration_name(self.short_s), self.short_s),
        )

    def describe(self) -> str:
        """What it takes to fire, in the windows it really reads."""
        return (
            f"over {self.rule.threshold:g}x its error budget in both the last "
            f"{duration_words(self.long_s)} and the last {duration_words(self.short_s)}"
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


def evaluate(
    counts: Counts, objective: float, rules: Sequence[ScaledRule], min_events: int = MIN_EVENTS
) -> BurnVerdict:
    """The worst alert the counts call for, and every window's burn rate."""
    rates: dict[float, float | None] = {}
    totals: dict[float, int] = {}
    for r in rules:
        for window_s in (r.long_s, r.short_s):
            if window_s not in rates:
                good, total = counts(window_s)
                rates[window_s], totals[window_s] = burn_rate(good, total, objective), total
    for r in rules:  # pages first: the rules are ordered by severity
        long, short = rates[r.long_s], rates[r.short_s]
        threshold = r.rule.threshold
        if totals[r.short_s] < min_events:
            continue
        if long is not None and short is not None and long > threshold and short > threshold:
            return BurnVerdict(r.rule.severity, r, rates)
    return BurnVerdict(None, None, rates)
