"""A worker's step profile: step costs fitted from the engine's own step records, the
calibration as a prior that stays, live steps that fade, and the costs in the heartbeat."""

from __future__ import annotations

import pytest

from vigil.engine.stats import StepStats, prefill_pairs_of
from vigil.platform.forecast.costs import DecodePoint, StepCosts
from vigil.platform.wire.worker import CostsWire
from vigil.platform.worker.profile import DECAY_S, StepProfile, bucket_of

TRUE = StepCosts(
    decode=(DecodePoint(1, 0.02), DecodePoint(4, 0.03), DecodePoint(16, 0.06)),
    mixed_s=0.01,
    seq_s=0.002,
    token_s=0.001,
    pair_s=0.0,
)


def step(num_seqs: int, num_tokens: int, total_s: float, pairs: int = 0) -> StepStats:
    num_decodes = num_seqs if num_tokens == num_seqs else num_seqs - 1
    return StepStats(num_seqs, num_tokens, num_decodes, 0.0, 0.0, total_s, 0.0, 0.0, 0, pairs)


def timed(costs: StepCosts, num_seqs: int, num_tokens: int, pairs: int = 0) -> StepStats:
    return step(num_seqs, num_tokens, costs.step_s(num_seqs, num_tokens, pairs), pairs)


def calibration(costs: StepCosts = TRUE) -> list[StepStats]:
    """As engine/calibrate.py runs it: a staircase of batches that each grow by a step
    of short prompts, then decode; then prompts alone."""
    out = []
    running = 0
    for size in (1, 2, 4, 8, 16):
        new = size - running
        out.append(timed(costs, size, running + 8 * new, new * prefill_pairs_of(0, 8)))
        out += [timed(costs, size, size)] * 2
        running = size
    for n in (64, 256):
        out.append(timed(costs, 1, n, prefill_pairs_of(0, n)))
    return out


def test_buckets_are_powers_of_two_of_the_batch() -> None:
    assert [bucket_of(n) for n in (1, 2, 3, 4, 7, 8, 31, 32)] == [0, 1, 1, 2, 2, 3, 4, 5]


def test_nothing_is_known_before_a_decode_step() -> None:
    profile = StepProfile()
    assert profile.costs(now_ts=0.0) is None
    profile.observe(step(1, 200, 0.3), now_ts=0.0)  # a prompt alone: no decode time yet
    assert profile.costs(now_ts=0.0) is None
    profile.observe(step(1, 1, 0.02), now_ts=0.0)
    costs = profile.costs(now_ts=0.0)
    assert costs is not None and costs.decode_s(1) == 0.02


def test_the_calibration_recovers_the_costs_it_was_run_with() -> None:
    profile = StepProfile()
    profile.calibrate(calibration())
    costs = profile.costs(now_ts=0.0)
    assert costs is not None
    assert [(p.batch_size, p.step_s) for p in costs.decode] == [
        (1, 0.02),
        (2, pytest.approx(0.02 + 0.01 / 3)),
        (4, 0.03),
        (8, pytest.approx(0.04)),
        (16, pytest.approx(0.06)),
    ]
    assert (costs.mixed_s, costs.seq_s, costs.token_s) == pytest.approx((0.01, 0.002, 0.001))
    assert costs.pair_s == pytest.approx(0.0, abs=1e-9)


def test_long_prompts_teach_the_attention_cost_and_short_ones_do_not_make_it_up() -> None:
    quadratic = StepCosts(TRUE.decode, 0.01, 0.002, 0.001, pair_s=0.00005)
    profile = StepProfile()
    profile.calibrate(calibration(quadratic))  # prompts up to 256 tokens: too short to tell
    costs = profile.costs(now_ts=0.0)
    assert costs is not None and costs.pair_s < 0.00001
    for n in (1000, 1500, 2000, 1200, 1800):
        profile.observe(timed(quadratic, 1, n, prefill_pairs_of(0, n)), now_ts=0.0)
    learnt = profile.costs(now_ts=0.0)
    assert learnt is not None
    assert learnt.pair_s == pytest.approx(0.00005, rel=0.1)
    assert learnt.step_s(1, 2000, prefill_pairs_of(0, 2000)) == pytest.approx(
        quadratic.step_s(1, 2000, prefill_pairs_of(0, 2000)), rel=0.02
    )


def test_live_steps_outweigh_the_calibration_and_fade_back_to_it() -> None:
    profile = StepProfile()
    profile.calibrate(calibration())
    slow = StepCosts(tuple(DecodePoint(p.batch_size, 3 * p.step_s) for p in TRUE.decode),
                     0.03, 0.006, 0.003, 0.0)  # fmt: skip
    for i in range(200):  # 20 s of a machine three times slower
        profile.observe(timed(slow, 8, 8), now_ts=100.0 + i / 10)
        profile.observe(timed(slow, 9, 9 + 40, prefill_pairs_of(0, 41)), now_ts=100.0 + i / 10)
    busy = profile.costs(now_ts=120.0)
    assert busy is not None
    assert busy.decode_s(8) == pytest.approx(3 * 0.04, rel=0.05)
    assert busy.step_s(9, 49) == pytest.approx(slow.step_s(9, 49), rel=0.05)
    # Ten minutes on, a live step weighs e^-10 of what it did: the calibration's again.
    later = profile.costs(now_ts=120.0 + 10 * DECAY_S)
    assert later is not None
    assert later.decode_s(8) == pytest.approx(0.04, rel=0.01)
    assert later.step_s(9, 49) == pytest.approx(TRUE.step_s(9, 49), rel=0.01)


def test_a_bigger_batch_never_costs_less_whatever_the_noise() -> None:
    profile = StepProfile()
    profile.calibrate([step(1, 1, 0.05), step(2, 2, 0.11), step(4, 4, 0.09), step(8, 8, 0.12)])
    costs = profile.costs(now_ts=0.0)
    assert costs is not None
    assert [p.step_s for p in costs.decode] == [0.05, 0.11, 0.11, 0.12]


def test_the_costs_go_up_in_the_heartbeat_as_fitted() -> None:
    profile = StepProfile()
    profile.calibrate(calibration())
    costs = profile.costs(now_ts=0.0)
    assert costs is not None
    assert CostsWire.of(costs).costs() == costs
