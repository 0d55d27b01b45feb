"""Admission: admit, shed or fall back, decided from a snapshot of one deployment's load.

`decide` is a pure function of plain data: the service holds the clocks and counters.

A new request's time to first token is forecast on the replica it would go to
(forecast/first_token.py): that engine's schedule stepped forward with its measured step
costs, through the prompts queued ahead of it and the running sequences whose ends free
a batch slot, to its own first token. The costs are the engine's own (worker/profile.py:
calibrated at load, so a first burst is forecast too; then fitted on live steps that
fade within minutes, so an overload an hour ago does not shape a decision now).

- An idle engine (nothing running, nothing queued there) is never shed on a forecast:
  the first token is one prefill away, whatever the forecast says.
- Interactive traffic is shed when its forecast passes TTFT_HEADROOM of the target: the
  target is a p99 and the forecast a typical value, so the headroom is what keeps the
  admitted requests' p99 within it (the forecast's accuracy is on /metrics,
  vigil_admission_ttft_forecast_ratio, and in ops/bench/overload_bench.py).
- Batch traffic is shed first, once a batch request would wait past
  `batch_shed_fraction` of the target, so the rest of the headroom stays with
  interactive traffic.
- A request that would make the streams slower than min_tokens_per_s (a decode step of
  the batch it would join, at the measured cost) is shed. A request of n choices joins
  the batch as n sequences.
Shedding at once, in milliseconds, beats letting a request time out in the queue: the
client can retry elsewhere or later, after Retry-After: the seconds the forecast is over
the target by.

An embedding request (`decide_embedding`) has no forecast: embedders report no step
costs. Its rule is the queue bound alone: shed once its class already has the
deployment's max_queue requests in flight on that version's engine (on any of its
workers; an embedding counts from admission until its vectors are back, since the
worker's batcher queues and computes it in one go), and batch traffic is shed while the
SLO loop sheds it. A shed one is told to retry after RETRY_AFTER_DEFAULT_S.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from vigil.engine.request import Priority
from vigil.platform.control.specs import DeploymentSpec, FallbackTrigger
from vigil.platform.errors import RateLimited
from vigil.platform.forecast.costs import StepCosts
from vigil.platform.forecast.first_token import EngineLoad, first_token_s
from vigil.platform.slo.actions import NO_ACTIONS, SLOActions

RETRY_AFTER_DEFAULT_S = 5
RETRY_AFTER_MAX_S = 60
# Admit while the forecast is within this share of the TTFT target (see above).
TTFT_HEADROOM = 0.8
# A forecast stops this many targets out: past that, a decision needs no more precision.
HORIZON_TARGETS = 4.0


class Verdict(StrEnum):
    ADMIT = "admitted"
    SHED = "shed"
    FALLBACK = "fallback"


class Reason(StrEnum):
    OK = "ok"
    QUEUE_FULL = "queue_full"
    SLO_TTFT = "slo_ttft"
    SLO_TOKENS_PER_S = "slo_tokens_per_s"
    QUEUE_WAIT = "queue_wait"  # fallback trigger
    PREDICTED_TTFT = "predicted_ttft"  # fallback trigger
    SLO_BURN = "slo_burn"  # the SLO loop's action while the error budget burns


@dataclass(frozen=True, slots=True)
class LoadSnapshot:
    queued: dict[Priority, int]  # admitted, no first token yet, on any replica
    oldest_queued_s: dict[Priority, float]  # how long the oldest queued one has waited
    engine: EngineLoad  # the replica the request would go to
    costs: StepCosts | None  # that replica's step costs (None: not reported)


@dataclass(frozen=True, slots=True)
class Admission:
    verdict: Verdict
    reason: Reason
    predicted_ttft_s: float | None  # the request's own (for its class), when forecast
    retry_after_s: int | None = None
    limit_s: float | None = None  # a shed one: the forecast admission would have allowed


def decide(
    priority: Priority,
    prompt_tokens: int,
    load: LoadSnapshot,
    spec: DeploymentSpec,
    allow_fallback: bool = True,
    actions: SLOActions = NO_ACTIONS,
    cached_tokens: int = 0,
    num_seqs: int = 1,
) -> Admission:
    """cached_tokens: of the prompt, likely in the replica's prefix cache; num_seqs: the
    request's choices (n), each a sequence in the batch."""
    slo = spec.slo
    idle = load.engine.idle
    ttft = forecast(load, priority, prompt_tokens, HORIZON_TARGETS * slo.ttft_p99_s, cached_tokens)
    if priority is Priority.BATCH and actions.shed_batch:
        return _shed(Reason.SLO_BURN, ttft, slo.ttft_p99_s)
    if priority is Priority.INTERACTIVE and allow_fallback and spec.fallback is not None:
        if actions.fallback:
            return Admission(Verdict.FALLBACK, Reason.SLO_BURN, ttft)
        fb = spec.fallback
        waited = load.oldest_queued_s[Priority.INTERACTIVE]
        if fb.trigger is FallbackTrigger.QUEUE_WAIT and waited > fb.threshold_s:
            return Admission(Verdict.FALLBACK, Reason.QUEUE_WAIT, ttft)
        if (
            fb.trigger is FallbackTrigger.PREDICTED_TTFT
            and not idle
            and ttft is not None
            and ttft > fb.threshold_s
        ):
            return Admission(Verdict.FALLBACK, Reason.PREDICTED_TTFT, ttft)

    if load.queued[priority] >= spec.limits[priority].max_queue:
        return _shed(Reason.QUEUE_FULL, ttft, slo.ttft_p99_s)
    if idle or ttft is None or load.costs is None:
        return Admission(Verdict.ADMIT, Reason.OK, ttft)
    limit = TTFT_HEADROOM * slo.ttft_p99_s
    if priority is Priority.BATCH:
        limit *= slo.batch_shed_fraction
    if ttft > limit:
        return _shed(Reason.SLO_TTFT, ttft, limit)
    engine = load.engine
    joined = min(len(engine.running) + len(engine.waiting) + num_seqs, engine.max_num_seqs)
    if 1.0 / load.costs.decode_s(joined) < slo.min_tokens_per_s:
        # Each running stream gets one token per step: one more stream only slows them.
        return _shed(Reason.SLO_TOKENS_PER_S, ttft, limit)
    return Admission(Verdict.ADMIT, Reason.OK, ttft)


def decide_embedding(
    priority: Priority,
    queued: dict[Priority, int],
    spec: DeploymentSpec,
    actions: SLOActions = NO_ACTIONS,
) -> Admission:
    """`queued`: per class, the embedding requests in flight on the engine."""
    if priority is Priority.BATCH and actions.shed_batch:
        return _shed(Reason.SLO_BURN, None, spec.slo.ttft_p99_s)
    if queued[priority] >= spec.limits[priority].max_queue:
        return _shed(Reason.QUEUE_FULL, None, spec.slo.ttft_p99_s)
    return Admission(Verdict.ADMIT, Reason.OK, None)


def forecast(
    load: LoadSnapshot,
    priority: Priority,
    prompt_tokens: int,
    horizon_s: float,
    cached_tokens: int = 0,
) -> float | None:
    """The request's time to first token on the snapshot's replica; None without costs."""
    if load.costs is None:
        return None
    return first_token_s(load.costs, load.engine, priority, prompt_tokens, horizon_s, cached_tokens)


def _shed(reason: Reason, predicted: float | None, limit_s: float) -> Admission:
    return Admission(Verdict.SHED, reason, predicted, retry_after(predicted, limit_s), limit_s)


def retry_after(predicted_s: float | None, limit_s: float) -> int:
    """Seconds until a request like this one would be admitted, if no more arrived: what
    its forecast is over the limit by (the work ahead drains at the rate forecast)."""
    if predicted_s is None:
        return RETRY_AFTER_DEFAULT_S
    return min(max(math.ceil(predicted_s - limit_s), 1), RETRY_AFTER_MAX_S)


def shed_error(spec: DeploymentSpec, admission: Admission) -> RateLimited:
    """What a shed request is told: why, and when to retry."""
    predicted = admission.predicted_ttft_s
    why = {
        Reason.QUEUE_FULL: "its queue is full",
        Reason.SLO_TTFT: f"the forecast time to first token ({predicted or 0:.1f} s) is over "
        f"the {admission.limit_s or 0:.1f} s admitted under its {spec.slo.ttft_p99_s:g} s target",
        Reason.SLO_TOKENS_PER_S: f"streams would fall below {spec.slo.min_tokens_per_s:g} tokens/s",
        Reason.SLO_BURN: "it is spending its error budget too fast, and batch traffic waits "
        "until it recovers",
    }[admission.reason]
    retry = admission.retry_after_s or 1
    return RateLimited(
        f"The deployment '{spec.name}' is overloaded: {why}. Retry in {retry} s.",
        code=f"overloaded_{admission.reason.value}",
        retry_after_s=retry,
    )
