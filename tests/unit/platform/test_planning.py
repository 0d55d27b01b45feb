"""The capacity planner's model: rates, load shapes, the simulation of continuous
batching, and the plan it makes, on plain data."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from vigil.platform.forecast.costs import DecodePoint, StepCosts
from vigil.platform.planning.load import (
    LoadError,
    SLOTarget,
    TargetLoad,
    fixed,
    lengths_of,
    lognormal,
)
from vigil.platform.planning.offered import OFFERED_WINDOW_S, OfferedLoad, ttft_p99_at
from vigil.platform.planning.planner import plan, predict
from vigil.platform.planning.rates import MeasuredRates, slowest
from vigil.platform.planning.simulate import Resource, simulate

COSTS = StepCosts(
    decode=(DecodePoint(1, 0.02), DecodePoint(8, 0.04), DecodePoint(32, 0.08)),
    mixed_s=0.01,
    seq_s=0.002,
    token_s=0.001,
    pair_s=0.0,
)
RATES = MeasuredRates(
    costs=COSTS,
    num_kv_blocks=1024,
    block_size=16,
    kv_bytes_per_token=46080,
    max_num_seqs=32,
    max_num_batched_tokens=2048,
    max_model_len=8192,
)
SLO = SLOTarget(ttft_p99_s=2.0, min_tokens_per_s=5.0)
N = 300  # requests per simulated run: enough for these checks, and quick


def test_decode_step_time_is_interpolated_and_extrapolated_by_the_last_slope() -> None:
    assert RATES.decode_s(0) == 0.0
    assert RATES.decode_s(1) == 0.02
    assert RATES.decode_s(4.5) == pytest.approx(0.03)
    assert RATES.decode_s(32) == 0.08
    assert RATES.decode_s(42) == pytest.approx(0.08 + 10 * (0.04 / 24))
    assert RATES.step_s(8, 8) == 0.04  # decoding only
    # A step that prefills is a line of its own: fixed, per sequence, per token, per pair.
    assert RATES.step_s(8, 500) == pytest.approx(0.01 + 8 * 0.002 + 492 / 1000)
    assert RATES.step_s(1, 100, 5050) == pytest.approx(0.01 + 0.002 + 99 / 1000)
    paired = replace(RATES, costs=replace(COSTS, pair_s=0.0001))
    assert paired.step_s(1, 100, 5050) == pytest.approx(0.111 + 5.05 * 0.0001)


def test_several_workers_plan_as_the_slowest_of_each() -> None:
    fast = replace(RATES, costs=replace(COSTS, token_s=0.0005), num_kv_blocks=2048)
    slow_costs = replace(COSTS, decode=(DecodePoint(1, 0.03), DecodePoint(16, 0.05)))
    slow = replace(RATES, costs=slow_costs, max_num_seqs=16)
    merged = slowest([fast, slow])
    assert merged.costs.token_s == 0.001
    assert merged.num_kv_blocks == 1024 and merged.max_num_seqs == 16
    assert [p.batch_size for p in merged.costs.decode] == [1, 8, 16, 32]
    assert merged.decode_s(1) == 0.03 and merged.decode_s(8) == 0.04


def test_a_lognormal_has_the_mean_and_p99_asked_for() -> None:
    lengths = lognormal(200, 800, "prompt_tokens")
    rng = random.Random(0)
    draws = sorted(lengths.draw(rng) for _ in range(50_000))
    assert sum(draws) / len(draws) == pytest.approx(200, rel=0.03)
    assert draws[int(0.99 * len(draws))] == pytest.approx(800, rel=0.05)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"mean": 100, "p99": 5000}, "times the mean fits no log-normal"),
        ({"mean": 300, "p99": 200}, "mean <= p99"),
        ({"mean": 100}, "give a number of tokens"),
        (True, "a number of tokens"),
        (0, "whole numbers from 1"),
        ([], "a list of 1 to"),
        ([10, 2.5], "whole numbers"),
    ],
)
def test_a_length_that_cannot_be_planned_for_says_what_to_fix(raw: object, fragment: str) -> None:
    with pytest.raises(LoadError, match=fragment) as info:
        lengths_of(raw, "prompt_tokens")
    assert info.value.param == "prompt_tokens"


def test_lengths_come_fixed_listed_or_lognormal() -> None:
    assert lengths_of(64, "p").values == (64,)
    listed = lengths_of([10, 20, 30, 1000], "p")
    assert listed.mean == 265 and listed.p99 == 1000
    assert lengths_of({"mean": 50, "p99": 150}, "p").sigma > 0


def test_a_request_alone_gets_its_prompt_step_then_one_decode_step_per_token() -> None:
    # 20 requests 1000 s apart: each runs alone.
    load = TargetLoad(0.001, fixed(300), fixed(11))
    sim = simulate(RATES, load, 0.001, num_requests=20, seed=0, abandon_s=10)
    assert sim.ttft_s == pytest.approx([0.01 + 0.002 + 299 / 1000] * 16)
    assert sim.stream_tokens_per_s == pytest.approx([1 / 0.02] * 16)
    assert sim.num_preemptions == 0 and not sim.overloaded


def test_the_same_seed_gives_the_same_run_and_work_is_bounded() -> None:
    load = TargetLoad(10, lognormal(200, 800, "p"), fixed(64))
    a = simulate(RATES, load, 8.0, num_requests=300, seed=3, abandon_s=4)
    b = simulate(RATES, load, 8.0, num_requests=300, seed=3, abandon_s=4)
    assert a.ttft_s == b.ttft_s and a.num_steps == b.num_steps
    over = simulate(RATES, load, 500.0, num_requests=300_000, seed=3, abandon_s=4)
    assert over.overloaded and over.end_s < 10


def test_batch_slots_cap_the_batch_and_hold_the_queue() -> None:
    rates = replace(RATES, max_num_seqs=2)
    load = TargetLoad(1, fixed(50), fixed(100))
    sim = simulate(rates, load, 15.0, num_requests=300, seed=0, abandon_s=30)
    assert sim.mean_batch_size <= 2.0
    assert max(sim.waited_s, key=lambda r: sim.waited_s[r]) is Resource.BATCH_SLOTS


def test_short_kv_memory_preempts_and_holds_the_queue() -> None:
    rates = replace(RATES, num_kv_blocks=40)  # 640 tokens: two requests of 300
    load = TargetLoad(1, fixed(100), fixed(200))
    sim = simulate(rates, load, 20.0, num_requests=200, seed=0, abandon_s=60)
    assert sim.num_preemptions > 0
    assert sim.peak_kv_blocks <= 40
    assert max(sim.waited_s, key=lambda r: sim.waited_s[r]) is Resource.KV_MEMORY


@pytest.mark.parametrize(
    ("rates", "load", "binding"),
    [
        (replace(RATES, num_kv_blocks=64), TargetLoad(4, fixed(100), fixed(200)), "kv_memory"),
        (replace(RATES, max_num_seqs=2), TargetLoad(4, fixed(50), fixed(100)), "batch_slots"),
        (RATES, TargetLoad(4, fixed(1000), fixed(16)), "compute"),
    ],
)
def test_the_plan_names_the_resource_that_runs_out_first(
    rates: MeasuredRates, load: TargetLoad, binding: str
) -> None:
    result = plan(rates, load, SLO, num_requests=N)
    assert result.binding.value == binding
    assert result.workers_needed is not None and result.prediction is not None
    assert result.prediction.meets(SLO)
    # Just past the rate found, one worker misses the SLO.
    over, _ = predict(rates, load, SLO, result.max_rps_per_worker * 1.15, N, 0)
    assert not over.meets(SLO)


def test_workers_needed_grow_with_the_load_and_each_share_meets_the_slo() -> None:
    shape = (fixed(200), fixed(32))
    one = plan(RATES, TargetLoad(1.0, *shape), SLO, num_requests=N)
    many = plan(RATES, TargetLoad(one.max_rps_per_worker * 5.5, *shape), SLO, num_requests=N)
    assert one.workers_needed == 1
    assert many.workers_needed == 6
    assert many.prediction is not None
    assert many.prediction.rps_per_worker <= many.max_rps_per_worker
    assert many.prediction.ttft_p99_s <= SLO.ttft_p99_s


def test_a_slo_no_worker_meets_alone_needs_no_number_of_workers() -> None:
    result = plan(RATES, TargetLoad(1, fixed(3000), fixed(16)), SLO, num_requests=N)  # 3 s alone
    assert result.workers_needed is None and result.max_rps_per_worker == 0
    assert result.binding is Resource.COMPUTE
    assert "no number of workers" in result.binding_why
    slow_decode = SLOTarget(ttft_p99_s=2.0, min_tokens_per_s=60)  # 50 tokens/s alone
    slow = plan(RATES, TargetLoad(1, fixed(10), fixed(16)), slow_decode, num_requests=N)
    assert "tokens/s" in slow.binding_why


def test_a_load_needing_too_many_workers_is_refused() -> None:
    with pytest.raises(LoadError, match="needs over"):
        plan(RATES, TargetLoad(1e7, fixed(200), fixed(32)), SLO, num_requests=N)


def test_the_load_offered_is_what_was_asked_over_the_last_window() -> None:
    offered = OfferedLoad()
    assert offered.load("chat", now_ts=0.0) is None
    for i in range(60):  # two a second for 30 s
        offered.add("chat", 100 + i, 20, now_ts=i / 2)
    load = offered.load("chat", now_ts=30.0)
    assert load is not None and load.rps == pytest.approx(60 / OFFERED_WINDOW_S)
    assert load.prompt.mean == pytest.approx(129.5) and load.output.mean == 20
    later = offered.load("chat", now_ts=45.0)  # the first half has left the window
    assert later is not None and later.rps == pytest.approx(30 / OFFERED_WINDOW_S)
    assert offered.load("chat", now_ts=100.0) is None
    offered.add("gone", 10, 10, now_ts=0.0)
    offered.forget({"chat"})
    assert offered.load("gone", now_ts=0.0) is None


def test_the_ttft_forecast_at_the_offered_load_is_the_planners() -> None:
    light = TargetLoad(0.5, fixed(100), fixed(16))
    p99 = ttft_p99_at(RATES, light, num_workers=1, slo=SLO)
    assert 0.1 < p99 < 0.5  # a prompt step or so: nobody waits at half a request a second
    assert ttft_p99_at(RATES, None, num_workers=1, slo=SLO) == 0.0  # nothing offered
    heavy = TargetLoad(200.0, fixed(500), fixed(64))
    assert ttft_p99_at(RATES, heavy, num_workers=1, slo=SLO) == float("inf")
    # Shared by more workers, the same load is lighter on each.
    assert ttft_p99_at(RATES, heavy, num_workers=1000, slo=SLO) < SLO.ttft_p99_s
