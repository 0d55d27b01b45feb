"""The console's live series: rates from token counts, TTFT percentiles over a window."""

from __future__ import annotations

from vigil.platform.telemetry.live import Gauges, LiveSeries

IDLE = Gauges(num_waiting=0, num_running=0, kv_cache_usage=0.0)


def test_tokens_per_second_is_the_rate_between_samples() -> None:
    live = LiveSeries()
    live.sample(IDLE, now_ts=100.0)
    live.add_tokens(30)
    point = live.sample(Gauges(2, 3, 0.5), now_ts=102.0)
    assert point.output_tokens_per_s == 15.0
    assert (point.num_waiting, point.num_running, point.kv_cache_usage) == (2, 3, 0.5)


def test_ttft_percentiles_use_nearest_rank_over_the_window() -> None:
    live = LiveSeries(ttft_window_s=60.0)
    for i in range(100):
        live.add_ttft(0.01 * (i + 1), now_ts=50.0)
    point = live.sample(IDLE, now_ts=60.0)
    assert point.ttft_p50_s == 0.5
    assert point.ttft_p99_s == 0.99
    # 61 s later every sample has left the window
    assert live.sample(IDLE, now_ts=111.0).ttft_p50_s is None


def test_points_are_bounded() -> None:
    live = LiveSeries(max_points=3)
    for t in range(10):
        live.sample(IDLE, now_ts=float(t))
    assert len(live.points) == 3
