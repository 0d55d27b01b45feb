"""The console's live charts, per deployment: one point a second, the last 15 minutes
kept in memory.

The recorder feeds it the same events it turns into /metrics (tokens, first tokens,
ends by outcome, fallback verdicts), so a chart and a PromQL `rate()` over the same
second agree; `sample()` turns the counts since the last sample into rates and reads
the engines' gauges at the same moment.
"""

from __future__ import annotations

import time
from collections import deque
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


@dataclass
class _Counts:
    num_tokens: int = 0
    ends: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LINES, 0))
    num_fallbacks: int = 0
    served_by: dict[str, int] = field(default_factory=dict)  # version -> served
    ttfts: deque[tuple[float, float]] = field(default_factory=deque)  # (monotonic ts, s)
    forecasts: deque[tuple[float, float]] = field(default_factory=deque)  # (ts, ratio)
    points: deque[DeploymentPoint] = field(default_factory=lambda: deque(maxlen=MAX_POINTS))
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

    def add_tokens(self, deployment: str, num_tokens: int) -> None:
        self._of(deployment).num_tokens += num_tokens

    def add_ttft(self, deployment: str, ttft_s: float, now_ts: float) -> None:
        self._of(deployment).ttfts.append((now_ts, ttft_s))

    def add_forecast(self, deployment: str, ratio: float, now_ts: float | None = None) -> None:
        now = time.monotonic() if now_ts is None else now_ts
        self._of(deployment).forecasts.append((now, ratio))

    def add_end(self, deployment: str, outcome: str, version: str | None = None) -> None:
        line = OUTCOME_LINES.get(outcome)
        if line is None:  # a client that left is none of them
            return
        c = self._of(deployment)
        c.ends[line] += 1
        if line == "served" and version is not None:
            c.served_by[version] = c.served_by.get(version, 0) + 1

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
    ) -> DeploymentPoint:
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
        )
        c.points.append(point)
        return point

    def points(self, deployment: str) -> list[DeploymentPoint]:
        counts = self._by_name.get(deployment)
        return list(counts.points) if counts is not None else []

    def latest(self, deployment: str) -> DeploymentPoint | None:
        counts = self._by_name.get(deployment)
        return counts.points[-1] if counts is not None and counts.points else None

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
