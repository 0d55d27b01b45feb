"""The console's live charts per deployment: rates between samples from the recorder's
own events, outcomes on their lines, TTFT percentiles over a window, 15 minutes kept."""

from __future__ import annotations

from vigil.platform.telemetry.deployments import MAX_POINTS, DeploymentSeries, EngineGauges

IDLE = EngineGauges()


def test_rates_are_per_second_between_samples_and_per_deployment() -> None:
    series = DeploymentSeries()
    series.sample("chat", IDLE, 2.0, now_ts=100.0)
    series.sample("lite", IDLE, None, now_ts=100.0)
    series.add_tokens("chat", 40)
    for outcome in ("stop", "length", "shed", "timed_out", "error", "abort"):
        series.add_end("chat", outcome)
    series.add_fallback("chat")
    point = series.sample("chat", EngineGauges(3, 1, 2, 0.25), 2.0, now_ts=102.0)
    assert point.output_tokens_per_s == 20.0
    assert point.requests_per_s == {"served": 1.0, "shed": 0.5, "timed_out": 0.5, "failed": 0.5}
    assert point.fallbacks_per_s == 0.5
    assert (point.num_waiting_interactive, point.num_waiting_batch, point.num_running) == (3, 1, 2)
    assert point.kv_cache_usage == 0.25 and point.ttft_target_s == 2.0
    lite = series.sample("lite", IDLE, None, now_ts=102.0)
    assert lite.output_tokens_per_s == 0.0 and lite.requests_per_s["served"] == 0.0


def test_the_first_sample_has_no_rate_and_the_next_counts_from_it() -> None:
    series = DeploymentSeries()
    series.add_tokens("chat", 10)
    assert series.sample("chat", IDLE, None, now_ts=50.0).output_tokens_per_s == 0.0
    series.add_tokens("chat", 5)
    assert series.sample("chat", IDLE, None, now_ts=51.0).output_tokens_per_s == 5.0


def test_ttft_percentiles_are_over_the_window() -> None:
    series = DeploymentSeries(ttft_window_s=60.0)
    for i in range(100):
        series.add_ttft("chat", 0.01 * (i + 1), now_ts=10.0)
    point = series.sample("chat", IDLE, 1.0, now_ts=20.0)
    assert (point.ttft_p50_s, point.ttft_p99_s) == (0.5, 0.99)
    assert series.sample("chat", IDLE, 1.0, now_ts=71.0).ttft_p99_s is None


def test_fifteen_minutes_are_kept_and_gone_deployments_forgotten() -> None:
    series = DeploymentSeries()
    for t in range(MAX_POINTS + 10):
        series.sample("chat", IDLE, None, shedding_batch=t % 2 == 0, now_ts=float(t))
    points = series.points("chat")
    assert len(points) == MAX_POINTS == 900
    latest = series.latest("chat")
    assert latest is not None and latest.shedding_batch is False  # t = 909, odd
    series.forget(keep=set())
    assert series.points("chat") == [] and series.latest("chat") is None


def test_the_canary_line_counts_what_the_canary_served() -> None:
    series = DeploymentSeries()
    series.sample("chat", IDLE, None, canary="m@next", now_ts=0.0)
    for version in ("m@1", "m@1", "m@1", "m@next"):
        series.add_end("chat", "stop", version)
    series.add_end("chat", "error", "m@next")  # failed: not served
    point = series.sample("chat", IDLE, None, canary="m@next", now_ts=2.0)
    assert (point.requests_per_s["served"], point.canary_served_per_s) == (2.0, 0.5)
    # Promoted: no canary now, and the old one's counts are forgotten once it is gone.
    assert series.sample("chat", IDLE, None, now_ts=3.0).canary_served_per_s == 0.0
    series.keep_versions("chat", {"m@next"})
    series.add_end("chat", "stop", "m@1")
    assert series.sample("chat", IDLE, None, canary="m@1", now_ts=4.0).canary_served_per_s == 1.0


def test_each_role_gets_its_own_line_and_a_shadows_traffic_only_its_own() -> None:
    series = DeploymentSeries()
    roles = {"stable": "m@1", "canary": "m@2", "shadow": "m@3"}
    gauges = {"m@1": EngineGauges(2, 1, 4, 0.5), "m@2": EngineGauges(0, 0, 1, 0.1)}
    series.sample("chat", IDLE, None, roles=roles, version_gauges=gauges, now_ts=0.0)
    series.add_tokens("chat", 30, "m@1")
    series.add_tokens("chat", 10, "m@2")
    series.add_tokens("chat", 8, "m@3", shadow=True)
    series.add_ttft("chat", 0.2, 1.0, "m@1")
    series.add_ttft("chat", 0.9, 1.0, "m@2")
    series.add_ttft("chat", 3.0, 1.0, "m@3", shadow=True)
    for version in ("m@1", "m@1", "m@2"):
        series.add_end("chat", "stop", version)
    series.add_end("chat", "length", "m@3", shadow=True)
    point = series.sample("chat", IDLE, None, roles=roles, version_gauges=gauges, now_ts=2.0)
    stable, canary, shadow = (point.versions[r] for r in ("stable", "canary", "shadow"))
    assert (stable.version, canary.version, shadow.version) == ("m@1", "m@2", "m@3")
    assert (stable.output_tokens_per_s, canary.output_tokens_per_s) == (15.0, 5.0)
    assert (stable.served_per_s, canary.served_per_s, shadow.served_per_s) == (1.0, 0.5, 0.5)
    assert (stable.ttft_p99_s, canary.ttft_p99_s, shadow.ttft_p99_s) == (0.2, 0.9, 3.0)
    assert (stable.num_waiting, stable.num_running, canary.num_running) == (3, 4, 1)
    assert (shadow.num_waiting, shadow.num_running) == (0, 0)  # no engine reported
    # The deployment's own totals leave the shadow out: no client saw its answers.
    assert point.output_tokens_per_s == 20.0 and point.requests_per_s["served"] == 1.5
    assert point.ttft_p99_s == 0.9


def test_refusals_are_counted_by_reason_beside_the_queue() -> None:
    series = DeploymentSeries()
    series.sample("chat", IDLE, None, now_ts=0.0)
    for reason in ("queue_full", "queue_full", "queue_full", "slo_ttft"):
        series.add_end("chat", "shed")
        series.add_shed("chat", reason)
    point = series.sample("chat", IDLE, None, now_ts=2.0)
    assert point.shed_per_s == {"queue_full": 1.5, "slo_ttft": 0.5}
    assert point.requests_per_s["shed"] == 2.0
    assert series.sample("chat", IDLE, None, now_ts=3.0).shed_per_s == {
        "queue_full": 0.0,
        "slo_ttft": 0.0,
    }
