"""In-memory time series for the console: one point a second, a few minutes kept.

The recorder feeds raw observations (tokens, TTFTs) as they happen; `sample()`
turns them into a point, with the engines' gauges read at the same moment.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LivePoint:
    wall_ts: float  # time.time(), for the chart's x axis
    num_waiting: int
    num_running: int
    kv_cache_usage: float
    output_tokens_per_s: float
    ttft_p50_s: float | None  # over the TTFT window
    ttft_p99_s: float | None
    num_requests_total: int


@dataclass(frozen=True, slots=True)
class Gauges:
    num_waiting: int
    num_running: int
    kv_cache_usage: float


class LiveSeries:
    def __init__(self, max_points: int = 300, ttft_window_s: float = 60.0) -> None:
        self.points: deque[LivePoint] = deque(maxlen=max_points)
        self._ttft_window_s = ttft_window_s
        self._ttfts: deque[tuple[float, float]] = deque()  # (monotonic ts, ttft_s)
        self._num_tokens = 0
        self._num_requests = 0
        self._last_sample: tuple[float, int] | None = None  # (monotonic ts, tokens then)

    def add_tokens(self, n: int) -> None:
        self._num_tokens += n

    def add_ttft(self, ttft_s: float, now_ts: float) -> None:
        self._ttfts.append((now_ts, ttft_s))

    def add_request(self) -> None:
        self._num_requests += 1

    def sample(self, gauges: Gauges, now_ts: float | None = None) -> LivePoint:
        now = time.monotonic() if now_ts is None else now_ts
        rate = 0.0
        if self._last_sample is not None and now > self._last_sample[0]:
            rate = (self._num_tokens - self._last_sample[1]) / (now - self._last_sample[0])
        self._last_sample = (now, self._num_tokens)
        while self._ttfts and self._ttfts[0][0] < now - self._ttft_window_s:
            self._ttfts.popleft()
        ttfts = sorted(t for _, t in self._ttfts)
        point = LivePoint(
            wall_ts=time.time(),
            num_waiting=gauges.num_waiting,
            num_running=gauges.num_running,
            kv_cache_usage=gauges.kv_cache_usage,
            output_tokens_per_s=rate,
            ttft_p50_s=quantile(ttfts, 0.50),
            ttft_p99_s=quantile(ttfts, 0.99),
            num_requests_total=self._num_requests,
        )
        self.points.append(point)
        return point

    def latest(self) -> LivePoint | None:
        return self.points[-1] if self.points else None


def quantile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank quantile: the smallest value with at least q of the values at or below it."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(round(q * len(sorted_values), 9)))
    return sorted_values[min(rank, len(sorted_values)) - 1]
