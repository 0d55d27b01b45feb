"""The console's live charts, per deployment: one point a second, the last 15 minutes
kept in memory (and in a file across a restart: telemetry/series_file.py).

The recorder feeds it the same events it turns into /metrics (tokens, first tokens,
ends by outcome, sheds by reason, fallback verdicts), so a chart and a PromQL `rate()`
over the same second agree; `sample()` turns the counts since the last sample into rates
and reads the engines' gauges at the same moment. Each point carries, besides the
deployment's totals, one `VersionPoint` per role its versions play (stable, canary,
shadow), so that a canary's or a shadow's line is drawn beside stable's; a shadow's
traffic counts only there, never in the deployment's totals (no client saw it).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from vigil.platform.telemetry.live import quantile

MAX_POINTS = 900  # 15 minutes, one a second
TTFT_WINDOW_S = 60.0

# The outcome label of vigil_requests_total -> the line it is drawn on.
OUTCOME_LINES = {
    "stop": "served",
    "length": "served",
    "shed": "shed",
    "timed_out": "timed_out",
    "error": "failed",
}
LINES = ("served", "shed", "timed_out", "failed")


@dataclass(frozen=True, slots=True)
class EngineGauges:
    """The engines that serve one deployment's versions, read together."""

    num_waiting_interactive: int = 0
    num_waiting_batch: int = 0
    num_running: int = 0
    kv_cache_usage: float = 0.0  # the fullest engine's, 0-1


@dataclass(frozen=True, slots=True)
class VersionPoint:
    """One version of the deployment, in the role it plays (ROLES)."""

    version: str  # model@version
    num_waiting: int  # its engines' queues, both classes
    num_running: int
    ttft_p50_s: float | None  # over the last TTFT_WINDOW_S
    ttft_p99_s: float | None
    output_tokens_per_s: float
    served_per_s: float


ROLES = ("stable", "canary", "shadow")


@dataclass(frozen=True, slots=True)
class DeploymentPoint:
    wall_ts: float  # time.time(), the chart's x axis
    num_waiting_interactive: int
    num_waiting_batch: int
    num_running: int
    kv_cache_usage: float
    ttft_p50_s: float | None  # over the last TTFT_WINDOW_S
    ttft_p99_s: float | None
    ttft_target_s: float | None  # the SLO's ttft_p99_s, drawn as a line
    # Actual over forecast TTFT of the requests admitted (the load model's accuracy),
    # over the last TTFT_WINDOW_S.
    forecast_p50: float | None
    forecast_p90: float | None
    output_tokens_per_s: float
    requests_per_s: dict[str, float]  # LINES -> rate
    canary_served_per_s: float  # of the served ones, those the canary version served
    fallbacks_per_s: float  # interactive requests sent to the fallback deployment
    shedding_batch: bool  # the SLO loop's actions now
    falling_back: bool
    # Requests refused at admission, by reason (queue_full, slo_ttft, ...): drawn with the
    # queue, which stays low through an overload that admission refuses.
    shed_per_s: dict[str, float] = field(default_factory=dict)
    versions: dict[str, VersionPoint] = field(default_factory=dict)  # ROLES -> point


@dataclass
class _VersionCounts:
    num_tokens: int = 0
    num_served: int = 0
    ttfts: deque[tuple[float, float]] = field(default_factory=deque)  # (monotonic ts, s)
    last: tuple[float, int, int] | None = None  # ts, tokens, served


@dataclass
class _Counts:
    num_tokens: int = 0
    ends: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LINES, 0))
    num_fallbacks: int = 0
    served_by: dict[str, int] = field(default_factory=dict)  # version -> served
    ttfts: deque[tuple[float, float]] = field(default_factory=deque)  # (monotonic ts, s)
    forecasts: deque[tuple[float, float]] = field(default_factory=deque)  # (ts, ratio)
    points: deque[DeploymentPoint] = field(default_factory=lambda: deque(maxlen=MAX_POINTS))
    sheds: dict[str, int] = field(default_factory=dict)  # reason -> refused
    last_sheds: dict[str, int] = field(default_factory=dict)
    versions: dict[str, _VersionCounts] = field(default_factory=dict)
    # ts, tokens, ends, fallbacks, served by version
    last: tuple[float, int, dict[str, int], int, dict[str, int]] | None = None


class DeploymentSeries:
    def __init__(self, ttft_window_s: float = TTFT_WINDOW_S) -> None:
        self._ttft_window_s = ttft_window_s
        self._by_name: dict[str, _Counts] = {}

    def _of(self, deployment: str) -> _Counts:
        counts = self._by_name.get(deployment)
        if counts is None:
            counts = self._by_name[deployment] = _Counts()
        return counts

    def _version(self, deployment: str, version: str) -> _VersionCounts:
        versions = self._of(deployment).versions
        counts = versions.get(version)
        if counts is None:
            counts = versions[version] = _VersionCounts()
        return counts

    def add_tokens(
        self, deployment: str, num_tokens: int, version: str | None = None, shadow: bool = False
    ) -> None:
        if not shadow:
            self._of(deployment).num_tokens += num_tokens
        if version is not None:
            self._version(deployment, version).num_tokens += num_tokens

    def add_ttft(
        self,
        deployment: str,
        ttft_s: float,
        now_ts: float,
        version: str | None = None,
        shadow: bool = False,
    ) -> None:
        if not shadow:
            self._of(deployment).ttfts.append((now_ts, ttft_s))
        if version is not None:
            self._version(deployment, version).ttfts.append((now_ts, ttft_s))

    def add_forecast(self, deployment: str, ratio: float, now_ts: float | None = None) -> None:
        now = time.monotonic() if now_ts is None else now_ts
        self._of(deployment).forecasts.append((now, ratio))

    def add_end(
        self, deployment: str, outcome: str, version: str | None = None, shadow: bool = False
    ) -> None:
        line = OUTCOME_LINES.get(outcome)
        if line is None:  # a client that left is none of them
            return
        if line == "served" and version is not None:
            self._version(deployment, version).num_served += 1
        if shadow:
            return
        c = self._of(deployment)
        c.ends[line] += 1
        if line == "served" and version is not None:
            c.served_by[version] = c.served_by.get(version, 0) + 1

    def add_shed(self, deployment: str, reason: str) -> None:
        """A refusal at admission (its end is counted by add_end too)."""
        sheds = self._of(deployment).sheds
        sheds[reason] = sheds.get(reason, 0) + 1

    def add_fallback(self, deployment: str) -> None:
        self._of(deployment).num_fallbacks += 1

    def sample(
        self,
        deployment: str,
        gauges: EngineGauges,
        ttft_target_s: float | None,
        canary: str | None = None,
        shedding_batch: bool = False,
        falling_back: bool = False,
        now_ts: float | None = None,
        roles: Mapping[str, str] | None = None,
        version_gauges: Mapping[str, EngineGauges] | None = None,
    ) -> DeploymentPoint:
        """`roles`: ROLES -> the version key playing it; `version_gauges`: version key ->
        its engines' gauges."""
        now = time.monotonic() if now_ts is None else now_ts
        c = self._of(deployment)
        elapsed_s = now - c.last[0] if c.last is not None else 0.0

        def rate(current: int, before: int) -> float:
            return (current - before) / elapsed_s if elapsed_s > 0 else 0.0

        before = c.last or (now, c.num_tokens, dict(c.ends), c.num_fallbacks, dict(c.served_by))
        c.last = (now, c.num_tokens, dict(c.ends), c.num_fallbacks, dict(c.served_by))
        if canary is None:
            canary_rate = 0.0
        else:
            canary_rate = rate(c.served_by.get(canary, 0), before[4].get(canary, 0))
        for window in (c.ttfts, c.forecasts):
            while window and window[0][0] < now - self._ttft_window_s:
                window.popleft()
        ttfts = sorted(t for _, t in c.ttfts)
        forecasts = sorted(r for _, r in c.forecasts)
        point = DeploymentPoint(
            wall_ts=time.time(),
            num_waiting_interactive=gauges.num_waiting_interactive,
            num_waiting_batch=gauges.num_waiting_batch,
            num_running=gauges.num_running,
            kv_cache_usage=gauges.kv_cache_usage,
            ttft_p50_s=quantile(ttfts, 0.50),
            ttft_p99_s=quantile(ttfts, 0.99),
            ttft_target_s=ttft_target_s,
            forecast_p50=quantile(forecasts, 0.50),
            forecast_p90=quantile(forecasts, 0.90),
            output_tokens_per_s=rate(c.num_tokens, before[1]),
            requests_per_s={line: rate(c.ends[line], before[2][line]) for line in LINES},
            canary_served_per_s=canary_rate,
            fallbacks_per_s=rate(c.num_fallbacks, before[3]),
            shedding_batch=shedding_batch,
            falling_back=falling_back,
            shed_per_s={
                reason: rate(n, c.last_sheds.get(reason, 0)) for reason, n in c.sheds.items()
            },
            versions={
                role: self._version_point(
                    deployment, key, (version_gauges or {}).get(key, EngineGauges()), now
                )
                for role, key in (roles or {}).items()
            },
        )
        c.last_sheds = dict(c.sheds)
        c.points.append(point)
        return point

    def _version_point(
        self, deployment: str, version: str, gauges: EngineGauges, now: float
    ) -> VersionPoint:
        v = self._version(deployment, version)
        elapsed_s = now - v.last[0] if v.last is not None else 0.0
        before = v.last or (now, v.num_tokens, v.num_served)
        v.last = (now, v.num_tokens, v.num_served)

        def rate(current: int, previous: int) -> float:
            return (current - previous) / elapsed_s if elapsed_s > 0 else 0.0

        while v.ttfts and v.ttfts[0][0] < now - self._ttft_window_s:
            v.ttfts.popleft()
        ttfts = sorted(t for _, t in v.ttfts)
        return VersionPoint(
            version=version,
            num_waiting=gauges.num_waiting_interactive + gauges.num_waiting_batch,
            num_running=gauges.num_running,
            ttft_p50_s=quantile(ttfts, 0.50),
            ttft_p99_s=quantile(ttfts, 0.99),
            output_tokens_per_s=rate(v.num_tokens, before[1]),
            served_per_s=rate(v.num_served, before[2]),
        )

    def points(self, deployment: str) -> list[DeploymentPoint]:
        counts = self._by_name.get(deployment)
        return list(counts.points) if counts is not None else []

    def latest(self, deployment: str) -> DeploymentPoint | None:
        counts = self._by_name.get(deployment)
        return counts.points[-1] if counts is not None and counts.points else None

    def history(self) -> dict[str, list[DeploymentPoint]]:
        """Every deployment's points, oldest first (what series_file.py saves)."""
        return {name: list(c.points) for name, c in self._by_name.items()}

    def restore(self, deployment: str, points: list[DeploymentPoint]) -> None:
        """Points kept from before a restart, ahead of any sampled since."""
        c = self._of(deployment)
        kept = [*points, *c.points][-MAX_POINTS:]
        c.points.clear()
        c.points.extend(kept)

    def forget(self, keep: set[str]) -> None:
        """Drop the series of deployments that are gone."""
        for name in set(self._by_name) - keep:
            del self._by_name[name]

    def keep_versions(self, deployment: str, versions: set[str]) -> None:
        """Forget the served counts of versions the deployment no longer runs."""
        c = self._by_name.get(deployment)
        if c is not None:
            for version in set(c.served_by) - versions:
                del c.served_by[version]
                if c.last is not None:
                    c.last[4].pop(version, None)
            for version in set(c.versions) - versions:
                del c.versions[version]
