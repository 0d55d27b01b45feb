"""The load model against step timings recorded from a real run (data/steps.json, made by
data/record_steps.py: the bundled chat model in float32 on one CPU thread, 8 batch
slots): costs fitted from the engine's calibration alone forecast a request alone and a
cold burst as they went, and what a busy spell taught is gone an hour later."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vigil.engine.request import Priority
from vigil.engine.stats import StepStats
from vigil.platform.forecast.first_token import EngineLoad, Waiting, first_token_s, first_tokens_s
from vigil.platform.planning.load import TargetLoad, fixed
from vigil.platform.planning.rates import MeasuredRates
from vigil.platform.planning.simulate import simulate
from vigil.platform.worker.profile import StepProfile

I = Priority.INTERACTIVE  # noqa: E741
RUN: dict[str, Any] = json.loads((Path(__file__).parent / "data" / "steps.json").read_text())
FIELDS = StepStats.__dataclass_fields__


def steps(records: list[dict[str, Any]]) -> list[StepStats]:
    return [StepStats(**{k: v for k, v in r.items() if k in FIELDS}) for r in records]


def calibrated() -> StepProfile:
    profile = StepProfile()
    profile.calibrate(steps(RUN["calibration"]))
    return profile


def empty_engine() -> EngineLoad:
    return EngineLoad(RUN["max_num_seqs"], RUN["max_num_batched_tokens"])


def test_an_idle_engine_is_forecast_one_prefill_from_the_calibration_alone() -> None:
    costs = calibrated().costs(now_ts=0.0)
    assert costs is not None
    alone = RUN["alone"]
    forecast = first_token_s(costs, empty_engine(), I, alone["num_prompt_tokens"])
    assert forecast == pytest.approx(alone["ttft_s"], rel=0.25)


def test_a_cold_burst_is_forecast_from_the_calibration_alone() -> None:
    costs = calibrated().costs(now_ts=0.0)
    assert costs is not None
    burst = RUN["burst"]["requests"]
    waiting = tuple(Waiting(I, r["num_prompt_tokens"], r["num_output_tokens"]) for r in burst)
    forecasts = first_tokens_s(costs, EngineLoad(*_limits(), (), waiting))
    ratios = [r["ttft_s"] / f for r, f in zip(burst, forecasts, strict=True) if f is not None]
    assert len(ratios) == len(burst)
    # Three waves of 8 (the batch slots): each request within 25% of when it came.
    assert all(0.75 <= x <= 1.25 for x in ratios), ratios
    # The last one, as admission forecasts a request arriving behind the other 23.
    last = first_token_s(
        costs, EngineLoad(*_limits(), (), waiting[:-1]), I, waiting[-1].num_prompt_tokens
    )
    assert burst[-1]["ttft_s"] / last == pytest.approx(1.0, abs=0.25)


def _limits() -> tuple[int, int]:
    return RUN["max_num_seqs"], RUN["max_num_batched_tokens"]


def test_a_busy_spell_shapes_the_costs_for_minutes_not_for_an_hour() -> None:
    quiet = calibrated().costs(now_ts=0.0)
    profile = calibrated()
    # The burst's steps, three times as slow (another process took the cores).
    for record, step in zip(RUN["burst"]["steps"], steps(RUN["burst"]["steps"]), strict=True):
        slow = StepStats(**{**{f: getattr(step, f) for f in FIELDS}, "forward_s": 3 * step.total_s})
        profile.observe(slow, now_ts=1000.0 + record["at_s"])
    assert quiet is not None
    busy = profile.costs(now_ts=1010.0)
    assert busy is not None and busy.decode_s(8) > 2 * quiet.decode_s(8)
    later = profile.costs(now_ts=1000.0 + 3600.0)
    assert later is not None
    assert later.decode_s(8) == pytest.approx(quiet.decode_s(8), rel=1e-6)
    assert later.token_s == pytest.approx(quiet.token_s, rel=1e-3)


def test_the_planner_simulates_the_same_model_as_admission_forecasts() -> None:
    """A burst arriving at once, simulated by the planner and forecast by admission from
    the same costs: the same first tokens. The simulation's first arrival starts alone
    (the rest arrive during its prefill step); the forecast starts from the state after
    that step: it running with 15 tokens to go, 39 waiting, no step in progress."""
    costs = calibrated().costs(now_ts=0.0)
    assert costs is not None
    rates = MeasuredRates(costs, 4096, 16, 46080, *_limits(), max_model_len=8192)
    burst = TargetLoad(1e9, fixed(40), fixed(16))
    sim = simulate(rates, burst, 1e9, num_requests=40, seed=0, abandon_s=1e3)
    first_step_s = costs.step_s(1, 40, 40 * 41 // 2)
    after = EngineLoad(*_limits(), (15,), tuple(Waiting(I, 40, 16) for _ in range(39)))
    forecasts = first_tokens_s(costs, after, in_progress_s=0.0)
    measured = [first_step_s + f for f in forecasts[3:35] if f is not None]  # requests 4-35
    assert sim.ttft_s == pytest.approx(measured, rel=1e-6)
