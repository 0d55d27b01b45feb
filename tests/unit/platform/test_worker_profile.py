"""A worker's step profile: decode step time by batch size and prefill seconds per token,
from the engine's own step records, kept while the engine idles."""

from __future__ import annotations

import pytest

from vigil.engine.stats import StepStats
from vigil.platform.worker.profile import StepProfile, bucket_of
from vigil.platform.worker.protocol import profile_wire


def step(num_seqs: int, num_tokens: int, num_decodes: int, total_s: float) -> StepStats:
    return StepStats(num_seqs, num_tokens, num_decodes, 0.0, 0.0, total_s, 0.0, 0.0)


def test_buckets_are_powers_of_two_of_the_batch() -> None:
    assert [bucket_of(n) for n in (1, 2, 3, 4, 7, 8, 31, 32)] == [0, 1, 1, 2, 2, 3, 4, 5]


def test_the_first_step_is_warm_up_and_decode_steps_fill_their_buckets() -> None:
    profile = StepProfile()
    profile.observe(step(1, 1, 1, 5.0))  # warm-up: compile, first allocations
    assert profile.decode_points() == []
    for _ in range(3):
        profile.observe(step(1, 1, 1, 0.02))
    profile.observe(step(5, 5, 5, 0.04))
    profile.observe(step(7, 7, 7, 0.04))
    points = profile.decode_points()
    assert [(p.batch_size, p.step_s, p.num_steps) for p in points] == [
        (1.0, 0.02, 3),
        (6.0, 0.04, 2),
    ]
    assert profile.decode_step_s(1) == 0.02
    assert profile.decode_step_s(3.5) == pytest.approx(0.03)
    assert profile.decode_step_s(40) == 0.04  # flat past the last bucket


def test_prefill_is_charged_what_the_step_took_beyond_a_decode_step_of_its_batch() -> None:
    profile = StepProfile()
    profile.observe(step(1, 1, 1, 1.0))  # warm-up
    profile.observe(step(1, 200, 0, 0.3))  # no decode measured yet to tell its base by
    assert profile.prefill_tokens_per_s is None
    profile.observe(step(1, 1, 1, 0.02))
    profile.observe(step(2, 201, 1, 0.22))  # 200 prompt tokens beside one decode
    assert profile.prefill_tokens_per_s == pytest.approx(199 / 0.2)
    profile.observe(step(1, 300, 0, 0.3))  # a prompt alone
    assert profile.prefill_tokens_per_s == pytest.approx((199 + 299) / (0.2 + 0.28))
    profile.observe(step(1, 11, 0, 0.01))  # quicker than its base: no time, not negative
    assert profile.prefill_tokens_per_s == pytest.approx((199 + 299 + 10) / (0.2 + 0.28))


def test_the_profile_goes_up_in_the_heartbeat_as_measured() -> None:
    profile = StepProfile()
    for s in (step(1, 1, 1, 1.0), step(1, 1, 1, 0.02), step(1, 100, 0, 0.1)):
        profile.observe(s)
    wire = profile_wire(profile)
    assert wire.prefill_tokens_per_s == pytest.approx(99 / 0.08)
    assert [(p.batch_size, p.step_s) for p in wire.decode] == [(1.0, 0.02)]
