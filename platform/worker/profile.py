"""What one engine costs, measured from its own steps, for the capacity planner.

Unlike the rates admission reads (runtime.RateMeter: recent, and forgotten when the
engine idles), a profile is the engine's speed, not its load: it keeps what it measured
while the engine is idle, so that a plan can be made between bursts of traffic.

    decode step time by batch size   steps that only decode, in power-of-two buckets of
                                     the number of sequences (1, 2-3, 4-7, ...): each
                                     bucket keeps the mean batch size it saw and an
                                     exponentially weighted step time
    prefill rate                     steps that prefill: the tokens beyond the first of
                                     each sequence in the step, over the time the step
                                     took beyond a decode step of as many sequences (from
                                     the buckets); prefix-cache hits are not computed, so
                                     not counted

So that a step of b sequences feeding t tokens in all is modelled as
decode_s(b) + (t - b) / rate: each sequence costs a decode step's share (the weights
are read once a step, whatever it feeds) and each further prompt token the marginal
cost of a token. The planner's simulation uses the same split. An engine's first step
(warm-up) is skipped.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass

from vigil.engine.stats import StepStats

EWMA_ALPHA = 0.1
PREFILL_WINDOW = 64  # prefill steps
MAX_BUCKETS = 12  # batch sizes up to 4095


@dataclass(slots=True)
class DecodeBucket:
    batch_size: float  # mean number of sequences of the steps seen
    step_s: float  # exponentially weighted
    num_steps: int


def bucket_of(num_seqs: int) -> int:
    """Bucket index: 0 for 1 sequence, 1 for 2-3, 2 for 4-7, ..."""
    return min(num_seqs.bit_length() - 1, MAX_BUCKETS - 1)


class StepProfile:
    """Fed from the engine's thread after every step; read whole from the event loop
    (each field is replaced, never mutated in place, by observe)."""

    def __init__(self) -> None:
        self.buckets: dict[int, DecodeBucket] = {}
        self._prefill: deque[tuple[int, float]] = deque(maxlen=PREFILL_WINDOW)
        self._warm = False

    def observe(self, step: StepStats) -> None:
        if not self._warm:
            self._warm = True
            return
        extra_tokens = step.num_tokens - step.num_seqs
        if extra_tokens <= 0:
            if step.num_seqs > 0:
                self._observe_decode(step.num_seqs, step.total_s)
            return
        base_s = self.decode_step_s(step.num_seqs)
        if base_s is None:  # nothing to tell a step's base from its tokens yet
            return
        # A step quicker than its base (noise) counts as no time, not as negative time.
        self._prefill.append((extra_tokens, max(step.total_s - base_s, 0.0)))

    def _observe_decode(self, num_seqs: int, step_s: float) -> None:
        index = bucket_of(num_seqs)
        old = self.buckets.get(index)
        if old is None:
            self.buckets[index] = DecodeBucket(float(num_seqs), step_s, 1)
            return
        n = old.num_steps + 1
        self.buckets[index] = DecodeBucket(
            old.batch_size + (num_seqs - old.batch_size) / n,
            old.step_s + EWMA_ALPHA * (step_s - old.step_s),
            n,
        )

    @property
    def prefill_tokens_per_s(self) -> float | None:
        window = list(self._prefill)
        tokens = sum(t for t, _ in window)
        seconds = sum(s for _, s in window)
        return tokens / seconds if tokens and seconds > 0 else None

    def decode_points(self) -> list[DecodeBucket]:
        return [self.buckets[i] for i in sorted(self.buckets)]

    def decode_step_s(self, num_seqs: int) -> float | None:
        """Step time of a decode batch of num_seqs, interpolated between the buckets
        measured (and held flat beyond them); None before any decode step."""
        points = self.decode_points()
        if not points:
            return None
        return interpolate([(p.batch_size, p.step_s) for p in points], float(num_seqs))


def interpolate(points: list[tuple[float, float]], x: float) -> float:
    """Piecewise-linear through points sorted by x, flat beyond the ends."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1
    return points[-1][1]
