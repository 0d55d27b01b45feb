"""One worker under a load: a discrete-event simulation of continuous batching, stepped
with the measured step times (rates.py), seeded, and bounded in work.

It follows the engine's scheduler (engine/scheduler.py) step for step, with one class
of priority and no prefix cache (every prompt token is computed: a plan that holds
without cache hits holds with them):

    each running sequence feeds its next tokens (one when decoding, a chunk of its
    prompt when prefilling) within the step's token budget, taking KV blocks as it
    grows; when none are free, the newest running sequence is preempted (its blocks
    freed, recomputed later from the head of the queue);
    the budget left admits waiting prompts in arrival order while there are batch
    slots and blocks for their first chunk; the head waits for memory, nobody passes it;
    the step takes rates.step_s(sequences, tokens, prompt pairs) (forecast/costs.py, the
    model admission forecasts with); a sequence whose tokens are all
    computed samples one; its first is its time to first token.

While requests wait, the request-seconds they wait are charged to what held the head of
the queue back: batch slots all taken, KV blocks short, or the step's token budget
spent (compute). Requests arrive as a Poisson process; the first and last WARMUP_SHARE
of them are simulated but not measured (the engine fills up, then drains).
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from vigil.engine.stats import prefill_pairs_of
from vigil.platform.planning.load import TargetLoad
from vigil.platform.planning.rates import MeasuredRates

WARMUP_SHARE = 0.1
MAX_WAITING = 20_000  # requests queued at once: past this the load is plainly too much
MAX_STEPS = 2_000_000  # engine steps simulated (taken in bulk while only decoding)


class Resource(StrEnum):
    COMPUTE = "compute"
    KV_MEMORY = "kv_memory"
    BATCH_SLOTS = "batch_slots"


@dataclass(slots=True)
class _Seq:
    index: int
    arrival_s: float
    num_prompt: int
    num_output: int  # it stops after this many tokens
    num_computed: int = 0
    num_generated: int = 0
    num_blocks: int = 0
    first_token_s: float | None = None
    running: bool = False

    @property
    def num_tokens(self) -> int:
        return self.num_prompt + self.num_generated


@dataclass(slots=True)
class SimResult:
    ttft_s: list[float] = field(default_factory=list)  # of the measured requests
    stream_tokens_per_s: list[float] = field(default_factory=list)  # those with 2+ tokens
    waited_s: dict[Resource, float] = field(default_factory=lambda: dict.fromkeys(Resource, 0.0))
    num_preemptions: int = 0
    num_steps: int = 0
    busy_s: float = 0.0
    seq_s: float = 0.0  # running sequences x seconds: mean batch = seq_s / busy_s
    peak_kv_blocks: int = 0
    overloaded: bool = False  # stopped early: a request waited past the abandon bound
    end_s: float = 0.0

    @property
    def mean_batch_size(self) -> float:
        return self.seq_s / self.busy_s if self.busy_s else 0.0


class Arrivals:
    """Poisson arrivals at rps with drawn lengths, made as the run reaches them (a run
    that stops early never pays for the rest). The draws depend on the seed alone, not
    on rps (gaps are unit exponentials scaled by 1/rps), so runs at two rates see the same
    requests: the search over rates is not thrown off by noise."""

    def __init__(
        self, load: TargetLoad, rps: float, num_requests: int, seed: int, max_len: int
    ) -> None:
        self._load, self._rps, self._max_len = load, rps, max_len
        self._left = num_requests
        self._rng = random.Random(seed)
        self._t = 0.0
        self._index = 0
        self.next: _Seq | None = None
        self.pop()

    def pop(self) -> _Seq | None:
        """The next arrival, replaced by the one after it."""
        seq = self.next
        if self._left == 0:
            self.next = None
            return seq
        self._left -= 1
        self._t += self._rng.expovariate(1.0) / self._rps
        prompt = min(self._load.prompt.draw(self._rng), self._max_len - 1)
        output = min(self._load.output.draw(self._rng), self._max_len - prompt)
        self.next = _Seq(self._index, self._t, prompt, output)
        self._index += 1
        return seq


def simulate(
    rates: MeasuredRates,
    load: TargetLoad,
    rps: float,
    *,
    num_requests: int,
    seed: int,
    abandon_s: float,
) -> SimResult:
    """One worker at `rps`. A request still waiting `abandon_s` after it arrived stops
    the run (overloaded): work is bounded by num_requests and by that."""
    max_len = min(rates.max_model_len, rates.kv_capacity_tokens)
    pending = Arrivals(load, rps, num_requests, seed, max_len)
    measured = range(int(num_requests * WARMUP_SHARE), int(num_requests * (1 - WARMUP_SHARE)))
    out = SimResult()
    waiting: deque[_Seq] = deque()
    running: list[_Seq] = []
    free = rates.num_kv_blocks
    now = 0.0
    while pending.next or waiting or running:
        if not waiting and not running:
            assert pending.next is not None
            now = max(now, pending.next.arrival_s)
        while pending.next and pending.next.arrival_s <= now:
            seq = pending.pop()
            assert seq is not None
            # It waited for the step it arrived during: that is compute's doing.
            out.waited_s[Resource.COMPUTE] += now - seq.arrival_s
            waiting.append(seq)
        if (waiting and now - waiting[0].arrival_s > abandon_s) or len(waiting) > MAX_WAITING:
            out.overloaded = True
            break
        if out.num_steps >= MAX_STEPS:
            break
        repeat = 1 if waiting else _steady_steps(rates, running, free, pending, now)
        step = _Step(rates, running, waiting, free)
        step.schedule()
        assert step.items or step.num_preemptions, "a step with work to do scheduled nothing"
        dt = rates.step_s(len(step.items), step.num_tokens, step.num_prefill_pairs)
        if repeat > 1:  # the same decode step, `repeat` times over: take them at once
            for seq, _ in step.items:
                step.free -= _blocks(seq.num_computed + repeat, rates) - seq.num_blocks
                seq.num_blocks = _blocks(seq.num_computed + repeat, rates)
            step.items = [(seq, repeat) for seq, _ in step.items]
        free = step.free
        out.num_preemptions += step.num_preemptions
        now += dt * repeat
        out.num_steps += repeat
        out.busy_s += dt * repeat
        out.seq_s += dt * repeat * len(step.items)
        out.peak_kv_blocks = max(out.peak_kv_blocks, rates.num_kv_blocks - free)
        if waiting and step.blocked is not None:
            out.waited_s[step.blocked] += dt * len(waiting)
        for seq, num_new in step.items:
            seq.num_computed += num_new
            if seq.num_computed < seq.num_tokens:
                continue
            seq.num_generated += num_new if repeat > 1 else 1
            if seq.first_token_s is None:
                seq.first_token_s = now
            if seq.num_generated >= seq.num_output:
                seq.running = False
                running.remove(seq)
                free += seq.num_blocks
                if seq.index in measured:
                    _measure(out, seq, now)
    out.end_s = now
    return out


def _blocks(num_tokens: int, rates: MeasuredRates) -> int:
    return -(-num_tokens // rates.block_size)


def _steady_steps(
    rates: MeasuredRates, running: list[_Seq], free: int, pending: Arrivals, now: float
) -> int:
    """How many identical decode-only steps come next: none waiting (the caller checks),
    every running sequence decoding, up to the first to finish, the next arrival, or the
    point where the free blocks could run short. Taking them at once gives the same
    result as one at a time, and keeps a long decode from costing a step each."""
    if not running or any(
        s.first_token_s is None or s.num_tokens - s.num_computed != 1 for s in running
    ):
        return 1
    steps = min(s.num_output - s.num_generated for s in running)
    if pending.next is not None:
        dt = rates.decode_s(len(running))
        steps = min(steps, max(1, math.ceil((pending.next.arrival_s - now) / dt)))
    # Each sequence may grow by (free // len(running)) blocks' worth of tokens.
    steps = min(steps, (free // len(running)) * rates.block_size)
    return max(1, steps)


def _measure(out: SimResult, seq: _Seq, now: float) -> None:
    assert seq.first_token_s is not None
    out.ttft_s.append(seq.first_token_s - seq.arrival_s)
    if seq.num_output >= 2:
        decode_s = now - seq.first_token_s
        out.stream_tokens_per_s.append((seq.num_output - 1) / decode_s if decode_s else math.inf)


class _Step:
    """One scheduling decision, as engine/scheduler.py takes it."""

    def __init__(
        self, rates: MeasuredRates, running: list[_Seq], waiting: deque[_Seq], free: int
    ) -> None:
        self.rates, self.running, self.waiting, self.free = rates, running, waiting, free
        self.items: list[tuple[_Seq, int]] = []
        self.budget = rates.max_num_batched_tokens
        self.num_preemptions = 0
        self.blocked: Resource | None = None  # what kept the head of the queue waiting

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.items)

    @property
    def num_prefill_pairs(self) -> int:
        return sum(prefill_pairs_of(s.num_computed, n) for s, n in self.items if n > 1)

    def schedule(self) -> None:
        for seq in list(self.running):
            if not seq.running:
                continue  # preempted earlier in this loop
            num_new = min(seq.num_tokens - seq.num_computed, self.budget)
            if num_new > 0 and self._reserve(seq, num_new):
                self.items.append((seq, num_new))
                self.budget -= num_new
        if self.num_preemptions:
            self.blocked = Resource.KV_MEMORY
        else:
            self._admit()

    def _blocks(self, num_tokens: int) -> int:
        return -(-num_tokens // self.rates.block_size)

    def _reserve(self, seq: _Seq, num_new: int) -> bool:
        need = self._blocks(seq.num_computed + num_new) - seq.num_blocks
        while need > self.free:
            victim = max(self.running, key=lambda s: s.index)
            self._preempt(victim)
            if victim is seq:
                return False
        self.free -= need
        seq.num_blocks += need
        return True

    def _preempt(self, seq: _Seq) -> None:
        self.running.remove(seq)
        self.items = [(s, n) for s, n in self.items if s is not seq]
        self.free += seq.num_blocks
        seq.num_blocks, seq.num_computed, seq.running = 0, 0, False
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def _admit(self) -> None:
        while self.waiting:
            if len(self.running) >= self.rates.max_num_seqs:
                self.blocked = Resource.BATCH_SLOTS
                return
            if self.budget <= 0:
                self.blocked = Resource.COMPUTE
                return
            seq = self.waiting[0]
            num_new = min(seq.num_tokens, self.budget)
            need = self._blocks(num_new)
            if need > self.free:
                self.blocked = Resource.KV_MEMORY
                return
            self.waiting.popleft()
            self.free -= need
            seq.num_blocks, seq.running = need, True
            self.running.append(seq)
            self.items.append((seq, num_new))
            self.budget -= num_new
