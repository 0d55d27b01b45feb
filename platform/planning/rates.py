"""What one worker measured, as the planner's model reads it: the engine's step costs
(forecast/costs.py, the same model admission forecasts with, fitted on the worker from
its own steps) and the memory and batch limits that bound a step."""

from __future__ import annotations

from dataclasses import dataclass

from vigil.platform.forecast.costs import StepCosts
from vigil.platform.forecast.costs import slowest as slowest_costs


@dataclass(frozen=True, slots=True)
class MeasuredRates:
    costs: StepCosts
    num_kv_blocks: int
    block_size: int
    kv_bytes_per_token: int
    max_num_seqs: int  # batch slots
    max_num_batched_tokens: int  # token budget of one step
    max_model_len: int

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_kv_blocks * self.block_size

    @property
    def kv_bytes(self) -> int:
        return self.kv_capacity_tokens * self.kv_bytes_per_token

    def decode_s(self, num_seqs: float) -> float:
        return self.costs.decode_s(num_seqs)

    def step_s(self, num_seqs: int, num_tokens: int, num_prefill_pairs: int = 0) -> float:
        return self.costs.step_s(num_seqs, num_tokens, num_prefill_pairs)


def slowest(rates: list[MeasuredRates]) -> MeasuredRates:
    """One worker's rates from several workers' (of one version): the slowest step
    costs, the smallest memory and slots, so that a plan holds on every one of them."""
    assert rates, "no rates to combine"
    block_size = max(r.block_size for r in rates)
    return MeasuredRates(
        costs=slowest_costs([r.costs for r in rates]),
        num_kv_blocks=min(r.kv_capacity_tokens for r in rates) // block_size,
        block_size=block_size,
        kv_bytes_per_token=max(r.kv_bytes_per_token for r in rates),
        max_num_seqs=min(r.max_num_seqs for r in rates),
        max_num_batched_tokens=min(r.max_num_batched_tokens for r in rates),
        max_model_len=min(r.max_model_len for r in rates),
    )
