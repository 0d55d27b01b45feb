"""Admission decisions on scripted load snapshots: plain data in, verdict out, no clocks."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from vigil.engine.bundled import ModelFormat, ModelKind
from vigil.engine.request import Priority
from vigil.engine.stats import StepStats
from vigil.platform.control.specs import (
    ClassLimits,
    DeploymentSpec,
    FallbackSpec,
    FallbackTrigger,
    SLOTargets,
    VersionRef,
)
from vigil.platform.gateway.admission import (
    Admission,
    LoadSnapshot,
    Reason,
    Verdict,
    decide,
    retry_after,
    shed_error,
)
from vigil.platform.slo.actions import SLOActions

I, B = Priority.INTERACTIVE, Priority.BATCH  # noqa: E741  (short names keep tables legible)


def load(
    queued: tuple[int, int] = (0, 0),
    tokens: tuple[int, int] = (0, 0),
    oldest: tuple[float, float] = (0.0, 0.0),
    prefill: float | None = 1000.0,
    decode_step: float | None = 0.05,
    starts: float | None = 2.0,
) -> LoadSnapshot:
    return LoadSnapshot(
        {I: queued[0], B: queued[1]},
        {I: tokens[0], B: tokens[1]},
        {I: oldest[0], B: oldest[1]},
        prefill,
        decode_step,
        starts,
    )


SPEC = DeploymentSpec(
    "chat",
    VersionRef("m", "1", ModelKind.GENERATE, ModelFormat.GGUF, "bundled:m"),
    limits={I: ClassLimits(max_queue=4, max_queue_wait_s=10), B: ClassLimits(8, 60)},
    slo=SLOTargets(ttft_p99_s=2.0, min_tokens_per_s=5.0, batch_shed_fraction=0.5),
)


def test_admits_when_the_predicted_ttft_is_within_target() -> None:
    a = decide(I, 500, load(tokens=(1000, 0)), SPEC)
    assert (a.verdict, a.reason) == (Verdict.ADMIT, Reason.OK)
    assert a.predicted_ttft_s == pytest.approx(1.5)  # (1000 queued + 500 own) / 1000 per s


def test_sheds_interactive_that_would_miss_its_ttft_target() -> None:
    a = decide(I, 500, load(tokens=(1600, 0)), SPEC)
    assert (a.verdict, a.reason) == (Verdict.SHED, Reason.SLO_TTFT)
    assert a.predicted_ttft_s == pytest.approx(2.1)


def test_batch_queue_does_not_delay_interactive_predictions() -> None:
    a = decide(I, 500, load(tokens=(0, 50_000)), SPEC)
    assert a.verdict is Verdict.ADMIT


def test_batch_is_shed_before_interactive() -> None:
    # 1.2 s of backlog: over half the 2 s target, under the target itself.
    snap = load(tokens=(700, 0))
    assert decide(B, 500, snap, SPEC).reason is Reason.SLO_TTFT
    assert decide(I, 500, snap, SPEC).verdict is Verdict.ADMIT


def test_full_queue_is_shed_with_retry_after_from_the_drain_rate() -> None:
    a = decide(I, 10, load(queued=(4, 0), starts=2.0), SPEC)
    assert (a.verdict, a.reason) == (Verdict.SHED, Reason.QUEUE_FULL)
    assert a.retry_after_s == 2  # 4 ahead, starting 2 per second


def test_retry_after_is_bounded_and_has_a_default_before_any_measurement() -> None:
    assert retry_after(load(queued=(4, 0), starts=None), I) == 5
    assert retry_after(load(queued=(4000, 0), starts=0.5), I) == 60
    assert retry_after(load(queued=(0, 0), starts=100.0), I) == 1
    # a batch request waits behind both classes
    assert retry_after(load(queued=(2, 6), starts=2.0), B) == 4


def test_streams_too_slow_for_the_tokens_per_second_target_shed_new_work() -> None:
    a = decide(I, 10, load(decode_step=0.25), SPEC)  # 4 tokens/s per stream < 5
    assert (a.verdict, a.reason) == (Verdict.SHED, Reason.SLO_TOKENS_PER_S)


def test_nothing_measured_yet_admits() -> None:
    a = decide(I, 8000, load(prefill=None, decode_step=None, starts=None), SPEC)
    assert a.verdict is Verdict.ADMIT and a.predicted_ttft_s is None


@pytest.mark.parametrize(
    ("trigger", "snap", "fallback"),
    [
        (FallbackTrigger.QUEUE_WAIT, load(oldest=(3.0, 0.0)), True),
        (FallbackTrigger.QUEUE_WAIT, load(oldest=(1.0, 0.0)), False),
        (FallbackTrigger.PREDICTED_TTFT, load(tokens=(1200, 0)), True),
        (FallbackTrigger.PREDICTED_TTFT, load(tokens=(100, 0)), False),
    ],
)
def test_fallback_triggers_for_interactive_only(
    trigger: FallbackTrigger, snap: LoadSnapshot, fallback: bool
) -> None:
    spec = replace(SPEC, fallback=FallbackSpec("small", trigger, threshold_s=1.0))
    a = decide(I, 100, snap, spec)
    assert (a.verdict is Verdict.FALLBACK) is fallback
    assert decide(B, 100, snap, spec).verdict is not Verdict.FALLBACK
    assert decide(I, 100, snap, spec, allow_fallback=False).verdict is not Verdict.FALLBACK


def test_worker_rate_meter_measures_prefill_and_forgets_old_decode_steps() -> None:
    from vigil.platform.worker.runtime import DECODE_STALE_S, RateMeter

    meter = RateMeter()
    meter.observe(StepStats(1, 50, 0, 0.0, 0.0, 9.0, 0.0, 0.0, 50))  # warm-up: not measured
    assert meter.prefill_tokens_per_s is None
    # a 400-token prompt in two chunks of 0.1 s, then a cached one that costs 0.01 s
    meter.observe(StepStats(1, 200, 0, 0.0, 0.0, 0.1, 0.0, 0.0, 0))
    meter.observe(StepStats(2, 201, 1, 0.0, 0.0, 0.1, 0.0, 0.0, 400))
    assert meter.prefill_tokens_per_s == pytest.approx(2000.0, rel=0.25)
    meter.observe(StepStats(1, 1, 1, 0.0, 0.0, 0.01, 0.0, 0.0, 300))
    assert meter.prefill_tokens_per_s > 2000.0  # a cache hit makes prompts cheaper
    meter.observe(StepStats(2, 2, 2, 0.0, 0.0, 0.05, 0.0, 0.0))  # a decode step
    now = time.monotonic()
    assert meter.decode_step_s(now) == pytest.approx(0.05)
    # an idle engine's last decode time goes stale instead of shedding forever
    assert meter.decode_step_s(now + DECODE_STALE_S + 1) is None


def test_a_full_batch_adds_the_wait_for_a_slot() -> None:
    # 4 running of 4 slots, 2 queued ahead: 3 must finish first, starting 1 per second.
    snap = replace(load(queued=(2, 0), tokens=(200, 0), starts=1.0), num_running=4, max_num_seqs=4)
    a = decide(I, 100, snap, SPEC)
    assert a.predicted_ttft_s == pytest.approx(3 / 1.0 + 300 / 1000.0)
    assert (a.verdict, a.reason) == (Verdict.SHED, Reason.SLO_TTFT)
    roomy = replace(snap, max_num_seqs=8)
    assert decide(I, 100, roomy, SPEC).predicted_ttft_s == pytest.approx(0.3)


def test_predictions_are_scaled_by_how_late_recent_first_tokens_came() -> None:
    # 1,000 prompt tokens at 1,000 tokens/s: 1.1 s with this prompt, under the 2 s target.
    snap = load(queued=(1, 0), tokens=(1000, 0), starts=None)
    assert decide(I, 100, snap, SPEC).verdict is Verdict.ADMIT
    late = replace(snap, ttft_correction=2.0)  # first tokens have come twice as late
    a = decide(I, 100, late, SPEC)
    assert a.predicted_ttft_s == pytest.approx(2.2)
    assert (a.verdict, a.reason) == (Verdict.SHED, Reason.SLO_TTFT)


def test_while_the_slo_burns_batch_is_shed_and_interactive_falls_back() -> None:
    spec = replace(SPEC, fallback=FallbackSpec("lite", FallbackTrigger.QUEUE_WAIT, 60.0))
    idle = load()
    shed = decide(B, 10, idle, spec, actions=SLOActions(shed_batch=True))
    assert (shed.verdict, shed.reason) == (Verdict.SHED, Reason.SLO_BURN)
    assert decide(I, 10, idle, spec, actions=SLOActions(shed_batch=True)).verdict is Verdict.ADMIT
    moved = decide(I, 10, idle, spec, actions=SLOActions(True, fallback=True))
    assert (moved.verdict, moved.reason) == (Verdict.FALLBACK, Reason.SLO_BURN)
    stays = decide(I, 10, idle, spec, allow_fallback=False, actions=SLOActions(True, True))
    assert stays.verdict is Verdict.ADMIT  # on the fallback deployment itself


@pytest.mark.parametrize(
    "reason", [r for r in Reason if r not in (Reason.OK, Reason.QUEUE_WAIT, Reason.PREDICTED_TTFT)]
)
def test_every_shed_reason_tells_the_client_why(reason: Reason) -> None:
    error = shed_error(SPEC, Admission(Verdict.SHED, reason, 1.5, retry_after_s=3))
    assert error.code == f"overloaded_{reason.value}" and error.retry_after_s == 3
    assert SPEC.name in error.message
