"""The plan: how many workers a load needs within the SLO, what they would give, and
which resource runs out first.

    1. The most requests/s one worker sustains: a search over rates (bisection on a log
       scale between a rate far below its capacity and one well above) for the highest at
       which the simulation meets both SLO targets (TTFT p99 at most ttft_p99_s; 99% of
       streams at least min_tokens_per_s) and nobody waits past the abandon bound.
    2. Workers needed: the load divided by that, rounded up; each worker is simulated at
       its share (rps / workers, Poisson: the router's least-loaded choice does a little
       better than that split, so the prediction leans safe), one more worker is added
       while that share misses the SLO.
    3. The binding resource, read from the first failing rate of the search: the
       tokens/s target missed is compute (decode steps too slow at that batch size); a
       TTFT missed is whatever held the queue's head back for the most request-seconds
       (batch slots, KV memory, or the token budget: compute), or compute when nothing
       queued (the prompts alone take too long to prefill).

Every simulation is seeded and bounded (requests simulated, abandon bound), so a plan
takes a bounded, small time: SEARCH_STEPS + 3 to 6 runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vigil.platform.planning.load import LoadError, SLOTarget, TargetLoad
from vigil.platform.planning.rates import MeasuredRates
from vigil.platform.planning.simulate import Resource, SimResult, simulate

PLAN_REQUESTS = 800  # simulated per run (the first and last tenth not measured)
SEARCH_STEPS = 9  # bisections of a 2000x range on a log scale: within 1.5%
MAX_WORKERS = 10_000
ABANDON_TTFT_MULTIPLE = 4.0  # a request waiting this many TTFT targets: overloaded


@dataclass(frozen=True, slots=True)
class Prediction:
    rps_per_worker: float
    ttft_p50_s: float
    ttft_p99_s: float
    stream_tokens_per_s_p50: float
    stream_tokens_per_s_p1: float  # 99% of streams at least this fast
    mean_batch_size: float
    peak_kv_usage: float  # share of the KV blocks
    num_preemptions: int
    overloaded: bool

    def meets(self, slo: SLOTarget) -> bool:
        return (
            not self.overloaded
            and self.ttft_p99_s <= slo.ttft_p99_s
            and self.stream_tokens_per_s_p1 >= slo.min_tokens_per_s
        )


@dataclass(frozen=True, slots=True)
class Plan:
    max_rps_per_worker: float  # 0: not even one request at a time meets the SLO
    workers_needed: int | None  # None: no number of workers does
    prediction: Prediction | None  # at workers_needed
    binding: Resource
    binding_why: str
    waiting_share: dict[Resource, float]  # at the first failing rate: who held the queue


def predict(
    rates: MeasuredRates, load: TargetLoad, slo: SLOTarget, rps: float, num_requests: int, seed: int
) -> tuple[Prediction, SimResult]:
    sim = simulate(
        rates,
        load,
        rps,
        num_requests=num_requests,
        seed=seed,
        abandon_s=max(ABANDON_TTFT_MULTIPLE * slo.ttft_p99_s, 1.0),
    )
    return (
        Prediction(
            rps_per_worker=rps,
            ttft_p50_s=percentile(sim.ttft_s, 0.5),
            ttft_p99_s=math.inf if sim.overloaded else percentile(sim.ttft_s, 0.99),
            stream_tokens_per_s_p50=percentile(sim.stream_tokens_per_s, 0.5),
            stream_tokens_per_s_p1=percentile(sim.stream_tokens_per_s, 0.01),
            mean_batch_size=sim.mean_batch_size,
            peak_kv_usage=sim.peak_kv_blocks / rates.num_kv_blocks,
            num_preemptions=sim.num_preemptions,
            overloaded=sim.overloaded,
        ),
        sim,
    )


def percentile(values: list[float], q: float) -> float:
    """Nearest rank; NaN for none (no stream of two tokens, say)."""
    if not values:
        return math.nan if q != 0.01 else math.inf
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def capacity_guess(rates: MeasuredRates, load: TargetLoad) -> float:
    """Requests/s one worker could finish if batches were always full: the start of the
    search, not an answer."""
    batch = rates.max_num_seqs
    per_request_s = (
        rates.costs.prefill_s(round(load.prompt.mean))
        + load.output.mean * rates.decode_s(batch) / batch
    )
    return 1.0 / per_request_s


def plan(
    rates: MeasuredRates,
    load: TargetLoad,
    slo: SLOTarget,
    seed: int = 0,
    num_requests: int = PLAN_REQUESTS,
) -> Plan:
    def run(rps: float) -> tuple[Prediction, SimResult]:
        return predict(rates, load, slo, rps, num_requests, seed)

    guess = capacity_guess(rates, load)
    lo, hi = guess / 1000, guess * 2
    lo_run, hi_run = run(lo), run(hi)
    if not lo_run[0].meets(slo):
        return _unreachable(lo_run[0], slo)
    while hi_run[0].meets(slo):  # the guess was low (cannot be by much: it is a bound)
        lo, lo_run = hi, hi_run
        hi *= 2
        hi_run = run(hi)
    for _ in range(SEARCH_STEPS):
        mid = math.sqrt(lo * hi)
        mid_run = run(mid)
        if mid_run[0].meets(slo):
            lo, lo_run = mid, mid_run
        else:
            hi, hi_run = mid, mid_run
    binding, why, shares = _binding(hi_run[0], hi_run[1], slo)
    workers = max(1, math.ceil(load.rps / lo - 1e-9))
    if workers > MAX_WORKERS:
        raise LoadError(
            f"{load.rps} requests/s needs over {MAX_WORKERS} workers at "
            f"{lo:.3g} requests/s each; plan for less",
            "rps",
        )
    prediction, _ = run(load.rps / workers)
    for _ in range(3):  # a lower rate is not always better by a hair (other gaps, same seed)
        if prediction.meets(slo):
            break
        workers = max(workers + 1, math.ceil(workers * 1.05))
        prediction, _ = run(load.rps / workers)
    return Plan(lo, workers, prediction, binding, why, shares)


def _binding(
    failing: Prediction, sim: SimResult, slo: SLOTarget
) -> tuple[Resource, str, dict[Resource, float]]:
    total = sum(sim.waited_s.values())
    shares = {r: (w / total if total else 0.0) for r, w in sim.waited_s.items()}
    rps = failing.rps_per_worker
    slow_ttft = failing.overloaded or failing.ttft_p99_s > slo.ttft_p99_s
    if not slow_ttft:
        return (
            Resource.COMPUTE,
            f"at {rps:.3g} requests/s per worker, decode steps of batch "
            f"{failing.mean_batch_size:.1f} give 1% of streams under "
            f"{slo.min_tokens_per_s:g} tokens/s",
            shares,
        )
    if total == 0:
        return (
            Resource.COMPUTE,
            f"at {rps:.3g} requests/s per worker, prompts take longer than "
            f"{slo.ttft_p99_s:g} s to reach their first token with nothing queued",
            shares,
        )
    top = max(shares, key=lambda r: shares[r])
    what = {
        Resource.COMPUTE: "engine steps (the token budget spent, or the step in progress)",
        Resource.KV_MEMORY: "no free KV blocks",
        Resource.BATCH_SLOTS: "every batch slot taken",
    }[top]
    return (
        top,
        f"at {rps:.3g} requests/s per worker, {shares[top]:.0%} of the queueing was behind {what}",
        shares,
    )


def _unreachable(alone: Prediction, slo: SLOTarget) -> Plan:
    if alone.stream_tokens_per_s_p1 < slo.min_tokens_per_s:
        why = (
            f"a stream alone gets {alone.stream_tokens_per_s_p1:.3g} tokens/s, under the "
            f"target of {slo.min_tokens_per_s:g}"
        )
    else:
        why = (
            f"a request alone waits {alone.ttft_p99_s:.3g} s (p99) for its first token, over "
            f"the target of {slo.ttft_p99_s:g} s"
        )
    shares = dict.fromkeys(Resource, 0.0)
    return Plan(0.0, None, alone, Resource.COMPUTE, why + ": no number of workers helps", shares)
