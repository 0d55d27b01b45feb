"""What one engine's steps cost (forecast/costs.py StepCosts), fitted from the engine's
own step timings: the model admission predicts time to first token with, and the
capacity planner plans with.

    decode_s   steps that only decode, in power-of-two buckets of the number of
               sequences (1, 2-3, 4-7, ...), each a weighted mean of batch size and step
               time; made non-decreasing in the batch size (a bigger batch never costs
               less, whatever the noise says)
    the rest   steps that prefill: their time, fitted by weighted least squares with no
               coefficient below zero, as mixed_s + seq_s * sequences
               + token_s * (tokens beyond each sequence's first)
               + pair_s * (query-key pairs of their prompt chunks)

Two sources of steps, added together:
- the calibration (engine/calibrate.py), run when the model is loaded, before the engine
  takes traffic: the prior, each of its steps weighing 1 for the engine's life, so that
  a cold engine is never predicted from nothing, and an idle one from what it costs
  idle. Something else busy on the machine only ever makes a step slower: the prior
  takes the fastest decode step of each batch size (the calibration runs each step
  that prefills twice and keeps the faster);
- the live steps, each weighing 1 when it ends and exp(-age / DECAY_S) after: a few
  seconds of traffic outweigh the calibration, and what an overload taught is gone
  minutes after it (an hour later, e^-60 of it). Steps slowed by something else on the
  machine count as much as any: that slowness is what the next requests will see too.

Fed from the engine's thread after every step (a few microseconds under a lock); the
costs are solved when read (once a heartbeat).
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from vigil.engine.stats import StepStats
from vigil.platform.forecast.costs import PAIRS_UNIT, DecodePoint, StepCosts

DECAY_S = 60.0  # a live step's weight falls by e every minute (halves in 42 s)
MAX_BUCKETS = 12  # batch sizes up to 4095
MIN_TOKEN_S = 1e-7  # a prompt token costs at least this (10M tokens/s), whatever the fit
RIDGE = 1e-9  # relative: keeps the normal equations solvable with one kind of step
# The attention term is only seen on long prompts (on the bundled chat model, a prompt's
# cost per token is flat to 700 tokens and 1.3x at 2,000): until steps that long have
# been measured, noise on short ones must not make it up. So the prior holds one step
# of PAIRS_EVIDENCE thousand pairs (a 450-token prompt) that cost nothing.
PAIRS_EVIDENCE = 100.0


def bucket_of(num_seqs: int) -> int:
    """Bucket index: 0 for 1 sequence, 1 for 2-3, 2 for 4-7, ..."""
    return min(num_seqs.bit_length() - 1, MAX_BUCKETS - 1)


@dataclass(slots=True)
class _Sums:
    """Weighted sums that decay together: weight, and whatever the caller adds."""

    values: list[float]
    ts: float = 0.0

    def decay_to(self, now_ts: float) -> None:
        if now_ts > self.ts:
            factor = math.exp(-(now_ts - self.ts) / DECAY_S)
            self.values = [v * factor for v in self.values]
            self.ts = now_ts

    def add(self, terms: Iterable[float]) -> None:
        self.values = [v + t for v, t in zip(self.values, terms, strict=True)]


def _decode_terms(num_seqs: int, step_s: float) -> list[float]:
    return [1.0, float(num_seqs), step_s]  # weight, batch size, step time


NUM_TERMS = 4  # mixed_s, seq_s, token_s, pair_s
NUM_SUMS = NUM_TERMS * (NUM_TERMS + 1) // 2 + NUM_TERMS + 1


def _prefill_terms(step: StepStats) -> list[float]:
    """x x^T (upper triangle), x y and y y, of one step that prefills, y its time."""
    x = (
        1.0,
        float(step.num_seqs),
        float(step.num_tokens - step.num_seqs),
        step.num_prefill_pairs / PAIRS_UNIT,
    )
    y = step.total_s
    pairs = [x[i] * x[j] for i in range(NUM_TERMS) for j in range(i, NUM_TERMS)]
    return [*pairs, *(v * y for v in x), y * y]


class StepProfile:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._prior_decode: dict[int, list[float]] = {}
        self._prior_prefill = [0.0] * NUM_SUMS
        self._prior_prefill[NUM_TERMS * (NUM_TERMS + 1) // 2 - 1] = PAIRS_EVIDENCE**2
        self._live_decode: dict[int, _Sums] = {}
        self._live_prefill = _Sums([0.0] * NUM_SUMS)

    def calibrate(self, steps: list[StepStats]) -> None:
        """The prior: the steps of the engine's calibration."""
        by_size: dict[int, list[float]] = {}
        for step in steps:
            if _decodes_only(step):
                by_size.setdefault(step.num_seqs, []).append(step.total_s)
        prefill = [s for s in steps if not _decodes_only(s)]
        with self._lock:
            for num_seqs, times in by_size.items():
                sums = self._prior_decode.setdefault(bucket_of(num_seqs), [0.0] * 3)
                fastest = min(times)
                for i, v in enumerate(_decode_terms(num_seqs, fastest)):
                    sums[i] += len(times) * v
            for step in prefill:
                for i, v in enumerate(_prefill_terms(step)):
                    self._prior_prefill[i] += v

    def observe(self, step: StepStats, now_ts: float | None = None) -> None:
        """One live step of the engine."""
        if step.num_seqs == 0:
            return
        now = time.monotonic() if now_ts is None else now_ts
        with self._lock:
            if _decodes_only(step):
                index = bucket_of(step.num_seqs)
                sums = self._live_decode.setdefault(index, _Sums([0.0] * 3, now))
                sums.decay_to(now)
                sums.add(_decode_terms(step.num_seqs, step.total_s))
            else:
                self._live_prefill.decay_to(now)
                self._live_prefill.add(_prefill_terms(step))

    def costs(self, now_ts: float | None = None) -> StepCosts | None:
        """The costs fitted now; None before any decode step was measured."""
        now = time.monotonic() if now_ts is None else now_ts
        with self._lock:
            decode = self._decode_points(now)
            if not decode:
                return None
            self._live_prefill.decay_to(now)
            sums = [
                a + b for a, b in zip(self._prior_prefill, self._live_prefill.values, strict=True)
            ]
        mixed_s, seq_s, token_s, pair_s = _fit(sums)
        return StepCosts(decode, mixed_s, seq_s, max(token_s, MIN_TOKEN_S), pair_s)

    def _decode_points(self, now_ts: float) -> tuple[DecodePoint, ...]:
        """Under the lock."""
        points: list[DecodePoint] = []
        for index in sorted(self._prior_decode.keys() | self._live_decode.keys()):
            total = list(self._prior_decode.get(index, [0.0] * 3))
            live = self._live_decode.get(index)
            if live is not None:
                live.decay_to(now_ts)
                total = [a + b for a, b in zip(total, live.values, strict=True)]
            weight, batch, step_s = total
            if weight > 1e-6:
                # A bigger batch never takes less time than a smaller one.
                floor = points[-1].step_s if points else 0.0
                points.append(DecodePoint(batch / weight, max(step_s / weight, floor)))
        return tuple(points)


def _decodes_only(step: StepStats) -> bool:
    return step.num_tokens == step.num_seqs


def _fit(sums: list[float]) -> tuple[float, float, float, float]:
    """Non-negative least squares of the four coefficients from the weighted sums: the
    best of the solutions over each subset of them that has none negative (15 small
    solves). Before any step that prefills: nothing but the token's floor."""
    n = NUM_TERMS
    xx = [[0.0] * n for _ in range(n)]
    k = 0
    for i in range(n):
        for j in range(i, n):
            xx[i][j] = xx[j][i] = sums[k]
            k += 1
    xy, yy = sums[k : k + n], sums[k + n]
    best, best_sse = [0.0] * n, yy
    if xx[0][0] > 0:
        for size in range(1, n + 1):
            for subset in itertools.combinations(range(n), size):
                coef = _solve([[xx[i][j] for j in subset] for i in subset], [xy[i] for i in subset])
                if coef is None or min(coef) < 0:
                    continue
                full = [0.0] * n
                for i, c in zip(subset, coef, strict=True):
                    full[i] = c
                sse = yy - 2 * sum(full[i] * xy[i] for i in range(n))
                sse += sum(full[i] * xx[i][j] * full[j] for i in range(n) for j in range(n))
                if sse < best_sse:
                    best, best_sse = full, sse
    return best[0], best[1], best[2], best[3]


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """a x = b by Gaussian elimination with a small ridge; None if singular."""
    n = len(b)
    m = [[*row, rhs] for row, rhs in zip(a, b, strict=True)]
    for i in range(n):
        m[i][i] += RIDGE * max(abs(m[i][i]), 1e-30)
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-30:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [vr - f * vc for vr, vc in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]
