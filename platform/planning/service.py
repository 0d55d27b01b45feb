"""Plans for the deployments a gateway serves: the rules around the pure planner (whose
rates, which SLO, which loads are refused) and the one-at-a-time bound."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from vigil.platform.errors import Conflict, InvalidRequest, RateLimited
from vigil.platform.gateway.serving import ServingView
from vigil.platform.planning.load import Lengths, LoadError, SLOTarget, TargetLoad, lengths_of
from vigil.platform.planning.measured import DeploymentRates, deployment_rates
from vigil.platform.planning.planner import Plan, plan
from vigil.platform.planning.rates import MeasuredRates

RETRY_AFTER_S = 2


@dataclass(frozen=True, slots=True)
class PlanAsk:
    deployment: str
    rps: float
    prompt_tokens: object  # a length spec (load.lengths_of)
    output_tokens: object
    ttft_p99_s: float | None = None  # None: the deployment's SLO
    min_tokens_per_s: float | None = None
    seed: int = 0


@dataclass(frozen=True, slots=True)
class PlanReport:
    measured: DeploymentRates
    rates: MeasuredRates
    load: TargetLoad
    slo: SLOTarget
    plan: Plan


class PlanService:
    """One plan at a time per gateway (about a second of CPU, in a thread off the event
    loop); another asked meanwhile is refused with a retry time, not queued."""

    def __init__(self, view: ServingView) -> None:
        self.view = view
        self.lock = asyncio.Lock()

    async def plan(self, ask: PlanAsk) -> PlanReport:
        measured = deployment_rates(self.view, ask.deployment)
        rates = measured.rates
        if rates is None:
            raise Conflict(
                f"No worker serving '{ask.deployment}' ({measured.version.key}) reports its "
                f"step costs ({measured.num_workers} serving it): a worker measures them when "
                "it loads the model; ask again once one has it ready.",
                code="not_measured",
            )
        own = measured.spec.slo
        slo = SLOTarget(
            own.ttft_p99_s if ask.ttft_p99_s is None else ask.ttft_p99_s,
            own.min_tokens_per_s if ask.min_tokens_per_s is None else ask.min_tokens_per_s,
        )
        load = _load(ask)
        _fits(load.prompt, load.output, rates)
        if self.lock.locked():
            raise RateLimited(
                f"Another plan is being computed; retry in {RETRY_AFTER_S} s.",
                code="plan_in_progress",
                retry_after_s=RETRY_AFTER_S,
            )
        async with self.lock:
            try:
                result = await asyncio.to_thread(plan, rates, load, slo, ask.seed)
            except LoadError as exc:
                raise InvalidRequest(str(exc), param=exc.param, code="invalid_load") from None
        return PlanReport(measured, rates, load, slo, result)


def _load(ask: PlanAsk) -> TargetLoad:
    try:
        return TargetLoad(
            ask.rps,
            lengths_of(ask.prompt_tokens, "prompt_tokens"),
            lengths_of(ask.output_tokens, "output_tokens"),
        )
    except LoadError as exc:
        raise InvalidRequest(str(exc), param=exc.param, code="invalid_load") from None


def _fits(prompt: Lengths, output: Lengths, rates: MeasuredRates) -> None:
    """Fixed and listed lengths must fit one worker's context and KV cache (a
    log-normal's rare longer draws are clipped to it)."""
    limit = min(rates.max_model_len, rates.kv_capacity_tokens)
    longest = max(prompt.values, default=0) + max(output.values, default=0)
    if prompt.values and output.values and longest > limit:
        raise InvalidRequest(
            f"The longest prompt plus output ({longest} tokens) is over what one worker holds "
            f"({limit} tokens: its context and KV cache); plan for shorter requests.",
            param="prompt_tokens",
            code="invalid_load",
        )
    if prompt.mean + output.mean > limit:
        raise InvalidRequest(
            f"A mean request of {prompt.mean + output.mean:.0f} tokens is over what one "
            f"worker holds ({limit} tokens); plan for shorter requests.",
            param="prompt_tokens",
            code="invalid_load",
        )
