"""What one engine's steps cost, as fitted from its own step timings (worker/profile.py):

    a step that only decodes    decode_s(num_seqs)
    a step that prefills        mixed_s + seq_s * num_seqs
                                  + token_s * (num_tokens - num_seqs)
                                  + pair_s * num_prefill_pairs / PAIRS_UNIT

decode_s is measured at the batch sizes seen and interpolated between them; beyond the
largest, it grows by the slope between the last two (or seq_s a sequence, with one).
A step that prefills is a line of its own: it runs other kernels than one that only
decodes (the fused int4 decode step, the native decode attention), and measured side by
side the two do not add up (the bundled chat model, float32, one CPU thread: 2
sequences decoding 112 ms, 1 decoding beside a 16-token prompt 126 ms). Each sequence
costs its share of reading the weights, each prompt token beyond a sequence's first its
marginal cost, and each query-key pair of a prompt chunk
(engine.stats.prefill_pairs_of) its attention, which is what makes a 2,000-token
prompt cost more than 8 times a 250-token one.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

PAIRS_UNIT = 1000  # pair_s is per thousand pairs, so its fit is well scaled


@dataclass(frozen=True, slots=True)
class DecodePoint:
    batch_size: float  # mean number of sequences of the steps measured
    step_s: float


@dataclass(frozen=True, slots=True)
class StepCosts:
    decode: tuple[DecodePoint, ...]  # sorted by batch size, at least one
    mixed_s: float  # a step that prefills: fixed
    seq_s: float  # ... per sequence in it
    token_s: float  # ... per token beyond each sequence's first
    pair_s: float  # ... per PAIRS_UNIT query-key pairs of its prompt chunks

    def __post_init__(self) -> None:
        assert self.decode, "step costs without a decode step time"
        sizes = [p.batch_size for p in self.decode]
        assert sizes == sorted(sizes), f"decode points out of order: {sizes}"
        assert self.token_s > 0, "a prompt token must cost something"
        assert min(self.mixed_s, self.seq_s, self.pair_s) >= 0, "negative step costs"

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
        return last.step_s + (x - last.batch_size) * self.slope_s

    @property
    def slope_s(self) -> float:
        """What one more sequence adds to a decode step past the largest batch measured."""
        if len(self.decode) < 2:
            return self.seq_s
        a, b = self.decode[-2], self.decode[-1]
        return max(0.0, (b.step_s - a.step_s) / (b.batch_size - a.batch_size))

    def step_s(self, num_seqs: int, num_tokens: int, num_prefill_pairs: int = 0) -> float:
        """A step of num_seqs sequences feeding num_tokens tokens in all."""
        if num_tokens <= num_seqs:
            return self.decode_s(num_seqs)
        return (
            self.mixed_s
            + self.seq_s * num_seqs
            + self.token_s * (num_tokens - num_seqs)
            + self.pair_s * num_prefill_pairs / PAIRS_UNIT
        )

    def summary(self) -> str:
        """For a log line: decode steps at the smallest and largest batch measured, and
        a prompt token's marginal cost."""
        first, last = self.decode[0], self.decode[-1]
        return (
            f"decode {first.step_s * 1000:.1f} ms at {first.batch_size:g}, "
            f"{last.step_s * 1000:.1f} ms at {last.batch_size:g}; "
            f"prefill {self.token_s * 1000:.2f} ms a token"
        )

    def prefill_s(self, num_tokens: int) -> float:
        """A prompt's own share of the steps that prefill it (no per-step costs)."""
        pairs = num_tokens * (num_tokens + 1) // 2
        return self.token_s * num_tokens + self.pair_s * pairs / PAIRS_UNIT


def slowest(costs: list[StepCosts]) -> StepCosts:
    """One engine's costs from several engines' (of one version): at each batch size
    the slowest decode, and the largest of each prefill cost, so that what is predicted
    holds on every one of them."""
    assert costs, "no costs to combine"
    sizes = sorted({p.batch_size for c in costs for p in c.decode})
    return StepCosts(
        decode=tuple(DecodePoint(b, max(c.decode_s(b) for c in costs)) for b in sizes),
        mixed_s=max(c.mixed_s for c in costs),
        seq_s=max(c.seq_s for c in costs),
        token_s=max(c.token_s for c in costs),
        pair_s=max(c.pair_s for c in costs),
    )
