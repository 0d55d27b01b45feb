"""Which service level indicators one request counts toward, and whether it was good
there, read from the request's own clock and outcome.

    ttft          it got its first token within the SLO's ttft_p99_s (a request that timed
                  out in the queue counts as a late one; a client that left before any
                  token counts toward nothing)
    tokens_per_s  its output after the first token came at min_tokens_per_s or faster
                  (requests of two or more output tokens)
    availability  it ended without an engine or worker failure and without a queue
                  timeout; a client that left counts toward nothing
    shed          it was admitted (the bad ones were refused with 429): the price of the
                  protection, never an alert by itself

The TTFT and tokens/s targets are p99s, so those SLIs' objective is 0.99; availability and
shed take the SLO's availability_target.
"""

from __future__ import annotations

from enum import StrEnum

from vigil.platform.control.specs import SLOTargets
from vigil.platform.telemetry.recorder import Outcome, RequestRecord

PERCENTILE_OBJECTIVE = 0.99


class SLI(StrEnum):
    TTFT = "ttft"
    TOKENS_PER_S = "tokens_per_s"
    AVAILABILITY = "availability"
    SHED = "shed"


ALERTING = (SLI.TTFT, SLI.TOKENS_PER_S, SLI.AVAILABILITY)


def objective(sli: SLI, slo: SLOTargets) -> float:
    if sli in (SLI.TTFT, SLI.TOKENS_PER_S):
        return PERCENTILE_OBJECTIVE
    return slo.availability_target


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
