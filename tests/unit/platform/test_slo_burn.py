"""Burn-rate arithmetic against hand-computed cases: budgets, the workbook's windows
scaled to an SLO's window and named by their real length, both windows of a rule needed
to alert, and enough requests in its short window; window edges."""

from __future__ import annotations

import pytest

from vigil.platform.slo.burn import (
    MIN_EVENTS,
    Severity,
    budget_remaining,
    burn_rate,
    duration_name,
    duration_words,
    evaluate,
    scaled_rules,
)
from vigil.platform.slo.windows import WindowSet

DAY = 86400.0


def test_burn_rate_is_the_bad_share_over_the_budget() -> None:
    # 99.9% objective: a budget of 1 bad in 1,000. 1.44% bad burns it 14.4 times too fast.
    assert burn_rate(good=9856, total=10_000, objective=0.999) == pytest.approx(14.4)
    assert burn_rate(good=1000, total=1000, objective=0.99) == 0.0
    assert burn_rate(good=0, total=10, objective=0.99) == pytest.approx(100.0)
    assert burn_rate(good=0, total=0, objective=0.99) is None  # no requests: no evidence


def test_budget_remaining_can_be_overspent() -> None:
    assert budget_remaining(999, 1000, 0.999) == pytest.approx(0.0)
    assert budget_remaining(9995, 10_000, 0.999) == pytest.approx(0.5)
    assert budget_remaining(990, 1000, 0.999) == pytest.approx(-9.0)
    assert budget_remaining(0, 0, 0.999) == 1.0


def test_the_workbooks_windows_scale_with_the_slo_window() -> None:
    month = scaled_rules(30 * DAY)
    assert [(r.long_s, r.short_s, r.rule.threshold) for r in month] == [
        (3600.0, 300.0, 14.4),
        (6 * 3600.0, 1800.0, 6.0),
        (3 * DAY, 6 * 3600.0, 1.0),
    ]
    assert [r.name for r in month] == ["1h", "6h", "3d"]
    assert [w for r in month for w, _ in r.windows] == ["1h", "5m", "6h", "30m", "3d", "6h"]
    hour = scaled_rules(3600.0)  # a 1-hour SLO: the page windows are 5 s and 0.42 s
    assert hour[0].long_s == pytest.approx(5.0) and hour[0].short_s == pytest.approx(5 / 12)
    # Named by what they are, not by the workbook's names for the windows they scale.
    assert [w for r in hour for w, _ in r.windows] == [
        "5s",
        "417ms",
        "30s",
        "2s500ms",
        "6m",
        "30s",
    ]


def test_windows_are_named_as_prometheus_durations_and_said_in_words() -> None:
    assert [duration_name(s) for s in (300.0, 3600.0, 3 * DAY, 30 * DAY)] == [
        "5m",
        "1h",
        "3d",
        "30d",
    ]
    assert duration_name(5040.0) == "1h24m" and duration_name(0.0694) == "69ms"
    assert duration_words(300.0) == "5 min" and duration_words(2.5) == "2 s 500 ms"


def test_a_rules_summary_names_the_windows_it_really_read() -> None:
    month, hour = scaled_rules(30 * DAY), scaled_rules(3600.0)
    assert month[0].describe() == (
        "over 14.4x its error budget in both the last 1 h and the last 5 min"
    )
    assert (
        hour[0].describe() == "over 14.4x its error budget in both the last 5 s and the last 417 ms"
    )
    assert month[2].describe() == "over 1x its error budget in both the last 3 d and the last 6 h"


def fixed(rates: dict[float, tuple[int, int]]):  # type: ignore[no-untyped-def]
    return lambda window_s: rates[window_s]


def test_a_page_needs_both_its_windows_over_the_threshold() -> None:
    rules = scaled_rules(30 * DAY)
    quiet = {w: (1000, 1000) for r in rules for w in (r.long_s, r.short_s)}
    assert evaluate(fixed(quiet), 0.999, rules).severity is None
    # 2% bad for the last hour, but the last 5 minutes are clean: the burn stopped.
    stopped = {**quiet, 3600.0: (980, 1000), 300.0: (100, 100)}
    verdict = evaluate(fixed(stopped), 0.999, rules)
    assert verdict.severity is None and verdict.rates[3600.0] == pytest.approx(20.0)
    burning = {**stopped, 300.0: (95, 100)}
    verdict = evaluate(fixed(burning), 0.999, rules)
    assert verdict.severity is Severity.PAGE and verdict.rule is rules[0]
    # Exactly at the threshold is not over it.
    at = {**quiet, 3600.0: (9856, 10_000), 300.0: (9856, 10_000)}
    assert evaluate(fixed(at), 0.999, rules).severity is None


def test_a_slow_burn_is_a_ticket_and_an_empty_window_never_alerts() -> None:
    rules = scaled_rules(30 * DAY)
    slow = {w: (1000, 1000) for r in rules for w in (r.long_s, r.short_s)}
    slow |= {3 * DAY: (9980, 10_000), 6 * 3600.0: (998, 1000)}  # burn 2 over 3 d and 6 h
    assert evaluate(fixed(slow), 0.999, rules).severity is Severity.TICKET
    empty = {**slow, 6 * 3600.0: (0, 0)}
    assert evaluate(fixed(empty), 0.999, rules).severity is None


def test_window_counts_cover_their_window_to_one_bucket() -> None:
    counts = WindowSet([10.0, 100.0])  # buckets of 0.5 s and 5 s
    for ts in range(100, 200):  # one request a second, every fifth one bad
        counts.add(float(ts) + 0.5, good=ts % 5 != 0)
    assert counts.counts(200.0, 10.0) == (8, 10)  # seconds 190-199
    assert counts.counts(200.0, 100.0) == (80, 100)
    assert counts.counts(199.9, 10.0) == (9, 11)  # up to one bucket more at the far edge
    assert counts.counts(215.0, 10.0) == (0, 0)  # a quiet spell empties the short window
    # 215 s: the long window's buckets are 5 s, so it spans 115-215 to a bucket.
    assert counts.counts(215.0, 100.0) == (68, 85)
    counts.add(400.0, good=False)  # long after: old buckets are reused, not summed
    assert counts.counts(400.0, 100.0) == (0, 1)
    with pytest.raises(AssertionError, match="no window of 50"):
        counts.counts(400.0, 50.0)


def test_a_rule_needs_enough_requests_in_its_short_window() -> None:
    """Every request bad, but only MIN_EVENTS - 1 of them in the fast page's 5 minutes:
    no page from that rule; one more and it pages. The slower rules, with more in their
    short windows, still speak."""
    rules = scaled_rules(30 * DAY)
    few = MIN_EVENTS - 1
    counts = {w: (0, few) for r in rules for w in (r.long_s, r.short_s)}
    assert evaluate(fixed(counts), 0.99, rules).severity is None
    verdict = evaluate(fixed(counts), 0.99, rules, min_events=few)
    assert verdict.severity is Severity.PAGE and verdict.rule is rules[0]
    enough = {**counts, 300.0: (0, MIN_EVENTS)}
    assert evaluate(fixed(enough), 0.99, rules).rule is rules[0]
    slower = {**counts, 1800.0: (0, 40), 6 * 3600.0: (0, 40)}  # the 6h rule's windows
    assert evaluate(fixed(slower), 0.99, rules).rule is rules[1]
    # The rates are there to read either way.
    assert evaluate(fixed(counts), 0.99, rules).rates[300.0] == pytest.approx(100.0)
