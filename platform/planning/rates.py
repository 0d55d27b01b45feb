"""What one worker measured, as the planner's model of a step reads it.

A step of `b` sequences feeding `t` tokens in all (one per decoding sequence, a chunk
of its prompt per prefilling one) takes

    step_s(b, t) = decode_s(b) + (t - b) / prefill_tokens_per_s

with decode_s interpolated between the batch sizes measured: each sequence costs its
share of a decode step (the weights are read once a step, whatever it feeds), each
token beyond a sequence's first the marginal cost of a token (worker/profile.py
measures both the same way). Beyond the largest batch measured, each further sequence
costs one such token: decode_s(b) = decode_s(b_max) + (b - b_max) / prefill_tokens_per_s.
That is optimistic for long contexts (attention grows with them), so plan_check.py warms
the batch sizes a plan will use.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DecodePoint:
    batch_size: float
    step_s: float


@dataclass(frozen=True, slots=True)
class MeasuredRates:
    prefill_tokens_per_s: float  # marginal: tokens beyond each sequence's first
    decode: tuple[DecodePoint, ...]  # sorted by batch size, at least one
    num_kv_blocks: int
    block_size: int
    kv_bytes_per_token: int
    max_num_seqs: int  # batch slots
    max_num_batched_tokens: int  # token budget of one step
    max_model_len: int

    def __post_init__(self) -> None:
        assert self.decode, "rates without a decode step time"
        assert self.prefill_tokens_per_s > 0, "a prefill rate must be positive"
        sizes = [p.batch_size for p in self.decode]
        assert sizes == sorted(sizes), f"decode points out of order: {sizes}"

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_kv_blocks * self.block_size

    @property
    def kv_bytes(self) -> int:
        return self.kv_capacity_tokens * self.kv_bytes_per_token

    def decode_s(self, num_seqs: float) -> float:
        if num_seqs <= 0:
            return 0.0
        points, x = self.decode, num_seqs
        if x <= points[0].batch_size:
            return points[0].step_s
        for a, b in itertools.pairwise(points):
            if x <= b.batch_size:
                span = b.batch_size - a.batch_size
                return a.step_s + (b.step_s - a.step_s) * (x - a.batch_size) / span
        last = points[-1]
        return last.step_s + (x - last.batch_size) / self.prefill_tokens_per_s

    def step_s(self, num_seqs: int, num_tokens: int) -> float:
        return self.decode_s(num_seqs) + (num_tokens - num_seqs) / self.prefill_tokens_per_s


def slowest(rates: list[MeasuredRates]) -> MeasuredRates:
    """One worker's rates from several workers' (of one version): the slowest prefill,
    at each batch size the slowest decode, the smallest memory and slots, so that a plan
    holds on every one of them."""
    assert rates, "no rates to combine"
    sizes = sorted({p.batch_size for r in rates for p in r.decode})
    block_size = max(r.block_size for r in rates)
    return MeasuredRates(
        prefill_tokens_per_s=min(r.prefill_tokens_per_s for r in rates),
        decode=tuple(DecodePoint(b, max(r.decode_s(b) for r in rates)) for b in sizes),
        num_kv_blocks=min(r.kv_capacity_tokens for r in rates) // block_size,
        block_size=block_size,
        kv_bytes_per_token=max(r.kv_bytes_per_token for r in rates),
        max_num_seqs=min(r.max_num_seqs for r in rates),
        max_num_batched_tokens=min(r.max_num_batched_tokens for r in rates),
        max_model_len=min(r.max_model_len for r in rates),
    )
