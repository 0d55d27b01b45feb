"""Which service level indicators one request counts toward, and whether it was good
there, read from the request's own clock and outcome.

    ttft          it got its first token within the SLO's ttft_p99_s (a request that timed
                  out in the queue counts as a late one; a client that left before any
                  token counts toward nothing)
    tokens_per_s  its output after the first token came at min_tokens_per_s or faster
                  (requests of two or more output tokens)
    availability  it ended without an engine or worker failure and without a queue
                  timeout; a client that left counts toward nothing
    shed          an interactive request was admitted, or sent to the fallback deployment
                  (which served it); the bad ones were refused with 429. Batch requests
                  count toward nothing here: they are shed first by design, to keep
                  interactive traffic within its targets.

The TTFT and tokens/s targets are p99s, so those SLIs' objective is 0.99; availability
takes the SLO's availability_target, shed its admission_target (0.99 by default: at most
1% of interactive requests shed over the window). Every SLI burns and alerts alike.
"""

from __future__ import annotations

from enum import StrEnum

from vigil.engine.request import Priority
from vigil.platform.control.specs import SLOTargets
from vigil.platform.telemetry.recorder import Outcome, RequestRecord

PERCENTILE_OBJECTIVE = 0.99


class SLI(StrEnum):
    TTFT = "ttft"
    TOKENS_PER_S = "tokens_per_s"
    AVAILABILITY = "availability"
    SHED = "shed"


# What a served request's clock and outcome say; a canary is judged against stable on these.
SERVED = (SLI.TTFT, SLI.TOKENS_PER_S, SLI.AVAILABILITY)
ALERTING = (*SERVED, SLI.SHED)


def objective(sli: SLI, slo: SLOTargets) -> float:
    if sli in (SLI.TTFT, SLI.TOKENS_PER_S):
        return PERCENTILE_OBJECTIVE
    if sli is SLI.SHED:
        return slo.admission_target
    return slo.availability_target


def counts_admission(priority: Priority) -> bool:
    """Whether an admission verdict on a request of this class counts toward `shed`."""
    return priority is Priority.INTERACTIVE


def classify(record: RequestRecord, slo: SLOTargets) -> dict[SLI, bool]:
    """SLI -> good, for each SLI the request counts toward (shed is counted at admission)."""
    clock, outcome = record.clock, record.outcome
    counted: dict[SLI, bool] = {}
    if clock.ttft_s is not None:
        counted[SLI.TTFT] = clock.ttft_s <= slo.ttft_p99_s
    elif outcome is Outcome.TIMED_OUT:
        counted[SLI.TTFT] = False
    first, last = clock.first_token_ts, clock.last_token_ts
    if record.num_output_tokens >= 2 and first is not None and last is not None:
        decode_s = last - first
        rate = (record.num_output_tokens - 1) / decode_s if decode_s > 0 else float("inf")
        counted[SLI.TOKENS_PER_S] = rate >= slo.min_tokens_per_s
    if outcome is not Outcome.ABORT:
        counted[SLI.AVAILABILITY] = outcome not in (Outcome.ERROR, Outcome.TIMED_OUT)
    return counted
