"""Admission decisions on scripted load snapshots: plain data in, verdict out, no clocks.

The step costs here make arithmetic easy: a prompt token costs 1 ms, a decode step of any
batch 1 ms (50 ms in the tests of slow streams), so a forecast is about the prompt tokens
ahead in milliseconds."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vigil.engine.bundled import ModelFormat, ModelKind
from vigil.engine.request import Priority
from vigil.platform.control.specs import (
    ClassLimits,
    DeploymentSpec,
    FallbackSpec,
    FallbackTrigger,
    SLOTargets,
    VersionRef,
)
from vigil.platform.forecast.costs import DecodePoint, StepCosts
from vigil.platform.forecast.first_token import EngineLoad, Waiting
from vigil.platform.gateway.admission import (
    RETRY_AFTER_DEFAULT_S,
    TTFT_HEADROOM,
    Admission,
    LoadSnapshot,
    Reason,
    Verdict,
    decide,
    decide_embedding,
    retry_after,
    shed_error,
)
from vigil.platform.slo.actions import SLOActions

I, B = Priority.INTERACTIVE, Priority.BATCH  # noqa: E741  (short names keep tables legible)
COSTS = StepCosts((DecodePoint(1, 0.001), DecodePoint(8, 0.001)), 0.0, 0.0, 0.001, 0.0)


def load(
    waiting: tuple[int, int] = (0, 0),  # prompt tokens queued: interactive, batch
    running: tuple[int, ...] = (),  # tokens left of each running sequence
    oldest: tuple[float, float] = (0.0, 0.0),
    queued: tuple[int, int] | None = None,  # over every replica (default: these)
    costs: StepCosts | None = COSTS,
    max_num_seqs: int = 8,
) -> LoadSnapshot:
    ahead = tuple(Waiting(p, n, 4) for p, n in zip((I, B), waiting, strict=True) if n)
    counts = queued or (int(waiting[0] > 0), int(waiting[1] > 0))
    return LoadSnapshot(
        {I: counts[0], B: counts[1]},
        {I: oldest[0], B: oldest[1]},
        EngineLoad(max_num_seqs, 512, running, ahead),
        costs,
    )


SPEC = DeploymentSpec(
    "chat",
    VersionRef("m", "1", ModelKind.GENERATE, ModelFormat.GGUF, "bundled:m"),
    limits={I: ClassLimits(max_queue=4, max_queue_wait_s=10), B: ClassLimits(8, 60)},
    slo=SLOTargets(ttft_p99_s=2.0, min_tokens_per_s=5.0, batch_shed_fraction=0.5),
)
LIMIT_S = TTFT_HEADROOM * SPEC.slo.ttft_p99_s  # 1.6 s


def test_admits_when_the_forecast_is_within_the_headroom_of_the_target() -> None:
    a = decide(I, 500, load(waiting=(800, 0)), SPEC)
    assert (a.verdict, a.reason) == (Verdict.ADMIT, Reason.OK)
    assert a.predicted_ttft_s == pytest.approx(1.3, abs=0.01)  # 800 ahead + 500 own, 1 ms each


def test_sheds_interactive_whose_forecast_passes_the_headroom() -> None:
    a = decide(I, 500, load(waiting=(1400, 0)), SPEC)
    assert (a.verdict, a.reason) == (Verdict.SHED, Reason.SLO_TTFT)
    assert a.predicted_ttft_s == pytest.approx(1.9, abs=0.01)
    assert a.retry_after_s == 1  # 0.3 s over the 1.6 s allowed, rounded up
    assert "1.9 s" in shed_error(SPEC, a).message and "1.6 s" in shed_error(SPEC, a).message


def test_an_idle_engine_is_never_shed_on_a_forecast() -> None:
    # 8,000 prompt tokens alone take 8 s, four times the target: still one prefill away.
    a = decide(I, 8000, load(), SPEC)
    assert (a.verdict, a.reason) == (Verdict.ADMIT, Reason.OK)
    assert a.predicted_ttft_s == pytest.approx(8.0, abs=0.05)
    assert decide(B, 8000, load(), SPEC).verdict is Verdict.ADMIT
    slow = load(costs=replace(COSTS, decode=(DecodePoint(1, 0.5),)))  # 2 tokens/s alone
    assert decide(I, 10, slow, SPEC).verdict is Verdict.ADMIT


def test_the_batch_queue_does_not_delay_interactive_forecasts() -> None:
    a = decide(I, 500, load(waiting=(0, 50_000)), SPEC)
    assert a.verdict is Verdict.ADMIT and a.predicted_ttft_s == pytest.approx(0.5, abs=0.01)
    assert decide(B, 500, load(waiting=(0, 50_000)), SPEC).verdict is Verdict.SHED


def test_batch_is_shed_before_interactive() -> None:
    # 0.9 s forecast: over half the 1.6 s allowed, under all of it.
    snap = load(waiting=(400, 0))
    b = decide(B, 500, snap, SPEC)
    assert (b.verdict, b.reason) == (Verdict.SHED, Reason.SLO_TTFT)
    assert decide(I, 500, snap, SPEC).verdict is Verdict.ADMIT


def test_a_full_batch_waits_for_the_first_running_sequence_to_end() -> None:
    slow = replace(COSTS, decode=(DecodePoint(1, 0.05), DecodePoint(8, 0.05)))
    # 8 slots taken, the first to end has 30 tokens to go at 50 ms a step: 1.5 s, then
    # its own 100-token prefill.
    full = load(running=(30, 40, 50, 60, 60, 60, 60, 60), costs=slow)
    a = decide(I, 100, full, SPEC)
    assert a.predicted_ttft_s == pytest.approx(0.05 + 30 * 0.05 + 0.099, abs=0.005)
    assert (a.verdict, a.reason) == (Verdict.SHED, Reason.SLO_TTFT)
    roomy = load(running=(30, 40, 50, 60, 60, 60, 60, 60), costs=slow, max_num_seqs=16)
    assert decide(I, 100, roomy, SPEC).verdict is Verdict.ADMIT


def test_full_queue_is_shed_with_retry_after() -> None:
    a = decide(I, 10, load(waiting=(4000, 0), queued=(4, 0)), SPEC)
    assert (a.verdict, a.reason) == (Verdict.SHED, Reason.QUEUE_FULL)
    assert a.retry_after_s == 3  # a 4 s forecast, 1.6 s allowed


def test_retry_after_is_bounded_and_has_a_default_without_a_forecast() -> None:
    assert retry_after(None, 1.6) == 5
    assert retry_after(1000.0, 1.6) == 60
    assert retry_after(1.7, 1.6) == 1


def test_streams_too_slow_for_the_tokens_per_second_target_shed_new_work() -> None:
    slow = replace(COSTS, decode=(DecodePoint(1, 0.1), DecodePoint(8, 0.25)))
    a = decide(I, 10, load(running=(5, 5, 5, 5, 5, 5), costs=slow), SPEC)  # 4 tokens/s at 7
    assert (a.verdict, a.reason) == (Verdict.SHED, Reason.SLO_TOKENS_PER_S)
    assert decide(I, 10, load(running=(5,), costs=slow), SPEC).verdict is Verdict.ADMIT


def test_a_request_of_n_choices_joins_the_batch_as_n_sequences() -> None:
    slow = replace(COSTS, decode=(DecodePoint(1, 0.1), DecodePoint(8, 0.25)))
    one_running = load(running=(5,), costs=slow)
    assert decide(I, 10, one_running, SPEC, num_seqs=1).verdict is Verdict.ADMIT  # 2: 8 tok/s
    a = decide(I, 10, one_running, SPEC, num_seqs=6)  # a batch of 7: 4 tokens/s
    assert (a.verdict, a.reason) == (Verdict.SHED, Reason.SLO_TOKENS_PER_S)


def test_without_step_costs_nothing_is_forecast_and_the_request_is_admitted() -> None:
    a = decide(I, 8000, load(waiting=(4000, 0), costs=None), SPEC)
    assert a.verdict is Verdict.ADMIT and a.predicted_ttft_s is None


@pytest.mark.parametrize(
    ("trigger", "snap", "fallback"),
    [
        (FallbackTrigger.QUEUE_WAIT, load(oldest=(3.0, 0.0)), True),
        (FallbackTrigger.QUEUE_WAIT, load(oldest=(1.0, 0.0)), False),
        (FallbackTrigger.PREDICTED_TTFT, load(waiting=(1200, 0)), True),
        (FallbackTrigger.PREDICTED_TTFT, load(waiting=(100, 0)), False),
        (FallbackTrigger.PREDICTED_TTFT, load(), False),  # idle: however long the prompt
    ],
)
def test_fallback_triggers_for_interactive_only(
    trigger: FallbackTrigger, snap: LoadSnapshot, fallback: bool
) -> None:
    spec = replace(SPEC, fallback=FallbackSpec("small", trigger, threshold_s=1.0))
    prompt = 100 if snap.engine.waiting else 5000
    a = decide(I, prompt, snap, spec)
    assert (a.verdict is Verdict.FALLBACK) is fallback
    assert decide(B, prompt, snap, spec).verdict is not Verdict.FALLBACK
    assert decide(I, prompt, snap, spec, allow_fallback=False).verdict is not Verdict.FALLBACK


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
    error = shed_error(SPEC, Admission(Verdict.SHED, reason, 1.9, retry_after_s=3, limit_s=1.6))
    assert error.code == f"overloaded_{reason.value}" and error.retry_after_s == 3
    assert SPEC.name in error.message


def test_a_prompt_the_prefix_cache_holds_is_forecast_for_its_other_tokens_only() -> None:
    snap = load(waiting=(100, 0))
    full = decide(I, 1600, snap, SPEC)
    cached = decide(I, 1600, snap, SPEC, cached_tokens=1500)
    assert (full.verdict, cached.verdict) == (Verdict.SHED, Verdict.ADMIT)
    assert cached.predicted_ttft_s == pytest.approx(0.2, abs=0.01)  # 100 ahead + 100 own


def test_an_embedding_is_admitted_under_its_classs_queue_bound_and_shed_at_it() -> None:
    assert decide_embedding(I, {I: 3, B: 8}, SPEC).verdict is Verdict.ADMIT
    full = decide_embedding(I, {I: 4, B: 0}, SPEC)
    assert (full.verdict, full.reason) == (Verdict.SHED, Reason.QUEUE_FULL)
    assert full.retry_after_s == RETRY_AFTER_DEFAULT_S  # no step costs: no forecast
    assert shed_error(SPEC, full).code == "overloaded_queue_full"
    assert decide_embedding(B, {I: 4, B: 7}, SPEC).verdict is Verdict.ADMIT  # its own class


def test_batch_embeddings_are_shed_while_the_slo_loop_sheds_batch_traffic() -> None:
    burning = SLOActions(shed_batch=True)
    shed = decide_embedding(B, {I: 0, B: 0}, SPEC, burning)
    assert (shed.verdict, shed.reason) == (Verdict.SHED, Reason.SLO_BURN)
    assert decide_embedding(I, {I: 0, B: 0}, SPEC, burning).verdict is Verdict.ADMIT
