"""Admission: admit, shed or fall back, decided from a snapshot of one deployment's load.

`decide` is a pure function of plain data: the service holds the clocks and counters.

The load model is first order and says so. A new request's time to first token is
predicted as two waits added:
- for a batch slot: when the running sequences and those queued ahead already fill
  max_num_seqs, it waits for the surplus to finish, at the measured rate at which
  queued requests start (in a saturated engine, one starts when one finishes);
- for prefill: the prompt tokens prefilled before its last one (queued work of its
  class and of every class served before it, plus its own prompt), divided by the
  measured prefill rate.
Shedding at once, in milliseconds, beats letting a request time out in the queue:
the client can retry elsewhere or later.

The model is optimistic under sustained overload (decode steps share the engine with
prefill; requests finish later than the start rate says), so each prediction is scaled
by `ttft_correction`: how much later than predicted the latest admitted requests of the
same engine got their first token, at worst (see lease.py), never below 1.

Order of protection: batch traffic is shed first, once the backlog would delay a new
interactive request by `batch_shed_fraction` of its TTFT target; interactive traffic
only when its own target would be missed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from vigil.engine.request import Priority
from vigil.platform.control.specs import DeploymentSpec, FallbackTrigger
from vigil.platform.errors import RateLimited
from vigil.platform.slo.actions import NO_ACTIONS, SLOActions

RETRY_AFTER_DEFAULT_S = 5
RETRY_AFTER_MAX_S = 60


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
    queued: dict[Priority, int]  # admitted, not started yet
    queued_prompt_tokens: dict[Priority, int]
    oldest_queued_s: dict[Priority, float]  # how long the oldest queued one has waited
    prefill_tokens_per_s: float | None  # measured; None before the first prefill
    decode_step_s: float | None  # measured time of a step that decodes; None before one
    starts_per_s: float | None  # measured rate at which queued requests start
    num_running: int = 0  # sequences in the engine's batch now
    max_num_seqs: int = 1 << 30  # the engine's batch cap
    ttft_correction: float = 1.0  # measured actual / predicted TTFT of recent requests


@dataclass(frozen=True, slots=True)
class Admission:
    verdict: Verdict
    reason: Reason
    predicted_ttft_s: float | None
    retry_after_s: int | None = None


def decide(
    priority: Priority,
    prompt_tokens: int,
    load: LoadSnapshot,
    spec: DeploymentSpec,
    allow_fallback: bool = True,
    actions: SLOActions = NO_ACTIONS,
) -> Admission:
    interactive_ttft = _predicted_ttft(
        load.queued[Priority.INTERACTIVE],
        load.queued_prompt_tokens[Priority.INTERACTIVE] + prompt_tokens,
        load,
    )
    if priority is Priority.BATCH and actions.shed_batch:
        return _shed(Reason.SLO_BURN, interactive_ttft, load, priority)
    if priority is Priority.INTERACTIVE and allow_fallback and spec.fallback is not None:
        if actions.fallback:
            return Admission(Verdict.FALLBACK, Reason.SLO_BURN, interactive_ttft)
        fb = spec.fallback
        waited = load.oldest_queued_s[Priority.INTERACTIVE]
        if fb.trigger is FallbackTrigger.QUEUE_WAIT and waited > fb.threshold_s:
            return Admission(Verdict.FALLBACK, Reason.QUEUE_WAIT, interactive_ttft)
        if (
            fb.trigger is FallbackTrigger.PREDICTED_TTFT
            and interactive_ttft is not None
            and interactive_ttft > fb.threshold_s
        ):
            return Admission(Verdict.FALLBACK, Reason.PREDICTED_TTFT, interactive_ttft)

    limits = spec.limits[priority]
    if load.queued[priority] >= limits.max_queue:
        return _shed(Reason.QUEUE_FULL, interactive_ttft, load, priority)

    slo = spec.slo
    if priority is Priority.INTERACTIVE:
        if interactive_ttft is not None and interactive_ttft > slo.ttft_p99_s:
            return _shed(Reason.SLO_TTFT, interactive_ttft, load, priority)
    else:
        backlog = sum(load.queued_prompt_tokens.values()) + prompt_tokens
        batch_ttft = _predicted_ttft(sum(load.queued.values()), backlog, load)
        if batch_ttft is not None and batch_ttft > slo.batch_shed_fraction * slo.ttft_p99_s:
            return _shed(Reason.SLO_TTFT, batch_ttft, load, priority)
    if load.decode_step_s is not None and 1.0 / load.decode_step_s < slo.min_tokens_per_s:
        # Each running stream gets one token per step: one more stream only slows them.
        return _shed(Reason.SLO_TOKENS_PER_S, interactive_ttft, load, priority)
    return Admission(Verdict.ADMIT, Reason.OK, interactive_ttft)


def _predicted_ttft(ahead: int, tokens: int, load: LoadSnapshot) -> float | None:
    """ahead: requests queued before this one; tokens: prompt tokens to prefill up to
    and including its own."""
    if not load.prefill_tokens_per_s:
        return None  # nothing measured yet: admit and learn
    surplus = load.num_running + ahead + 1 - load.max_num_seqs
    slot_wait = surplus / load.starts_per_s if surplus > 0 and load.starts_per_s else 0.0
    return (slot_wait + tokens / load.prefill_tokens_per_s) * load.ttft_correction


def _shed(
    reason: Reason, predicted: float | None, load: LoadSnapshot, priority: Priority
) -> Admission:
    return Admission(Verdict.SHED, reason, predicted, retry_after(load, priority))


def retry_after(load: LoadSnapshot, priority: Priority) -> int:
    """Seconds until the queue ahead of a new request has drained at the measured rate."""
    if not load.starts_per_s:
        return RETRY_AFTER_DEFAULT_S
    ahead = load.queued[Priority.INTERACTIVE] + (
        load.queued[Priority.BATCH] if priority is Priority.BATCH else 0
    )
    seconds = math.ceil(max(ahead, 1) / load.starts_per_s)
    return min(max(seconds, 1), RETRY_AFTER_MAX_S)


def shed_error(spec: DeploymentSpec, admission: Admission) -> RateLimited:
    """What a shed request is told: why, and when to retry."""
    predicted = admission.predicted_ttft_s
    why = {
        Reason.QUEUE_FULL: "its queue is full",
        Reason.SLO_TTFT: f"the predicted time to first token ({predicted or 0:.1f} s) would "
        f"miss its target ({spec.slo.ttft_p99_s:.1f} s)",
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
