"""`POST /api/admin/plan`: the capacity planner (vigil.platform.planning) over a
deployment's measured rates. It changes nothing, so a viewer may ask; one plan is
computed at a time (planning.service), another meanwhile gets 429 with Retry-After."""

from __future__ import annotations

import math
from typing import Annotated, TypeAlias

from litestar import Controller, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody
from msgspec import Meta, Struct

from vigil.platform.api.admin.bodies import In, Name
from vigil.platform.api.admin.responses import write_responses
from vigil.platform.errors import ServiceUnavailable
from vigil.platform.planning.planner import Prediction
from vigil.platform.planning.rates import MeasuredRates
from vigil.platform.planning.service import PlanAsk, PlanReport, PlanService
from vigil.platform.wire.errors import ErrorBody

Planner: TypeAlias = NamedDependency[PlanService | None]
Lengthspec = int | list[int] | dict[str, float]
Positive = Annotated[float, Meta(gt=0, le=1e6)]


class PlanIn(In):
    deployment: Name
    rps: Annotated[float, Meta(gt=0, le=1e7)]
    prompt_tokens: Annotated[
        Lengthspec,
        Meta(description='Tokens: `200`, `{"mean": 200, "p99": 800}` or `[40, 200, 1000]`.'),
    ]
    output_tokens: Annotated[Lengthspec, Meta(description="As prompt_tokens.")]
    ttft_p99_s: Positive | None = None  # None: the deployment's SLO
    min_tokens_per_s: Annotated[float, Meta(ge=0, le=1e6)] | None = None
    seed: Annotated[int, Meta(ge=0, le=2**31)] = 0


class DecodePointOut(Struct, kw_only=True):
    batch_size: float
    step_s: float


class RatesOut(Struct, kw_only=True):
    prefill_tokens_per_s: float  # a prompt token's marginal cost, as a rate
    decode: list[DecodePointOut]
    # A step that prefills (forecast/costs.py): mixed_s + seq_s * sequences + token_s *
    # tokens beyond each sequence's first + pair_s * thousands of query-key pairs.
    mixed_s: float
    seq_s: float
    token_s: float
    pair_s: float
    kv_bytes_per_token: int
    kv_blocks: int
    block_size: int
    kv_capacity_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int


class LengthsOut(Struct, kw_only=True):
    mean: float
    p99: float


class SLOOut(Struct, kw_only=True):
    ttft_p99_s: float
    min_tokens_per_s: float


class PredictionOut(Struct, kw_only=True):
    rps_per_worker: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None  # null: requests queue without bound
    stream_tokens_per_s_p50: float | None
    stream_tokens_per_s_p1: float | None  # 99% of streams at least this fast
    mean_batch_size: float
    peak_kv_usage: float
    num_preemptions: int


class PlanOut(Struct, kw_only=True):
    deployment: str
    version: str
    num_workers: int  # serving the deployment now
    num_workers_measured: int  # whose rates the plan uses (the slowest of each)
    rates: RatesOut
    rps: float
    prompt_tokens: LengthsOut
    output_tokens: LengthsOut
    slo: SLOOut
    max_rps_per_worker: float
    workers_needed: int | None  # null: no number of workers meets the SLO
    predicted: PredictionOut | None  # at workers_needed
    binding: str  # compute | kv_memory | batch_slots
    binding_why: str
    waiting_share: dict[str, float]  # at the first rate over capacity: what held the queue


PLAN_RESPONSES = {
    **write_responses(404),
    409: ResponseSpec(
        ErrorBody,
        description="No worker serving the deployment reports its step costs (each measures "
        "them when it loads the model).",
    ),
    429: ResponseSpec(
        ErrorBody,
        description="Another plan is being computed (one at a time), or too many failed "
        "sign-ins; answered with `Retry-After`.",
    ),
    503: ResponseSpec(ErrorBody, description="This server runs no gateway to plan for."),
}


class PlanController(Controller):
    path = "/plan"

    @post(
        "/",
        summary="Workers needed for a load, with the predicted TTFT p99 and tokens/s",
        description="Simulates continuous batching with the deployment's measured step costs "
        "(the model admission forecasts with: decode step time by batch size, the cost of a "
        "step that prefills; KV blocks, batch slots) at the load given, and answers the "
        "workers needed to meet the SLO (the deployment's, or `ttft_p99_s` and "
        "`min_tokens_per_s`), the prediction at that count, and the resource that binds. "
        "`workers_needed` is null when no number of workers meets it.",
        status_code=200,
        responses=PLAN_RESPONSES,
    )
    async def make_plan(self, data: JSONBody[PlanIn], planner: Planner) -> PlanOut:
        if planner is None:
            raise ServiceUnavailable("This server runs no gateway to plan for.", code="no_gateway")
        ask = PlanAsk(
            data.deployment,
            data.rps,
            data.prompt_tokens,
            data.output_tokens,
            data.ttft_p99_s,
            data.min_tokens_per_s,
            data.seed,
        )
        return plan_out(await planner.plan(ask))


def plan_out(report: PlanReport) -> PlanOut:
    measured, load, slo, result = report.measured, report.load, report.slo, report.plan
    return PlanOut(
        deployment=measured.spec.name,
        version=measured.version.key,
        num_workers=measured.num_workers,
        num_workers_measured=measured.num_measured,
        rates=_rates_out(report.rates),
        rps=load.rps,
        prompt_tokens=LengthsOut(mean=load.prompt.mean, p99=load.prompt.p99),
        output_tokens=LengthsOut(mean=load.output.mean, p99=load.output.p99),
        slo=SLOOut(ttft_p99_s=slo.ttft_p99_s, min_tokens_per_s=slo.min_tokens_per_s),
        max_rps_per_worker=result.max_rps_per_worker,
        workers_needed=result.workers_needed,
        predicted=_prediction_out(result.prediction) if result.workers_needed else None,
        binding=result.binding.value,
        binding_why=result.binding_why,
        waiting_share={r.value: share for r, share in result.waiting_share.items()},
    )


def _rates_out(rates: MeasuredRates) -> RatesOut:
    costs = rates.costs
    return RatesOut(
        prefill_tokens_per_s=1.0 / costs.token_s,
        decode=[DecodePointOut(batch_size=p.batch_size, step_s=p.step_s) for p in costs.decode],
        mixed_s=costs.mixed_s,
        seq_s=costs.seq_s,
        token_s=costs.token_s,
        pair_s=costs.pair_s,
        kv_bytes_per_token=rates.kv_bytes_per_token,
        kv_blocks=rates.num_kv_blocks,
        block_size=rates.block_size,
        kv_capacity_tokens=rates.kv_capacity_tokens,
        max_num_seqs=rates.max_num_seqs,
        max_num_batched_tokens=rates.max_num_batched_tokens,
    )


def _prediction_out(p: Prediction | None) -> PredictionOut | None:
    if p is None:
        return None
    return PredictionOut(
        rps_per_worker=p.rps_per_worker,
        ttft_p50_s=_finite(p.ttft_p50_s),
        ttft_p99_s=_finite(p.ttft_p99_s),
        stream_tokens_per_s_p50=_finite(p.stream_tokens_per_s_p50),
        stream_tokens_per_s_p1=_finite(p.stream_tokens_per_s_p1),
        mean_batch_size=p.mean_batch_size,
        peak_kv_usage=p.peak_kv_usage,
        num_preemptions=p.num_preemptions,
    )


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
