"""When a new request would get its first token on one engine: the engine's schedule
(engine/scheduler.py) stepped forward with its measured step costs (costs.py), from what
is in it now.

Each step, every running sequence decodes a token; the prompts being prefilled take the
step's token budget left, in order, and what is left of it (and of the batch slots)
admits waiting prompts, chunked when long. A sequence leaves at its last output token,
its slot free for the next step. While nothing can be admitted (no slot, or nobody
waiting) and nothing is being prefilled, the steps only decode, and are taken in one
go up to the next sequence to leave. The new request waits behind every request of its
class or a better one (interactive before batch, first come first served). The
engine takes new requests between steps, and the step running when one arrives is
counted whole: a client that sends its next request when its last answer ends arrives
as a step begins (measured: the queue span of closed-loop clients is one step long).

What is not known is estimated by the caller: how many tokens each running sequence
and each waiting one will still produce (gateway/lease.py, from the lengths of recent
answers), and how much of each prompt the prefix cache holds (gateway/prefixes.py):
those tokens are not computed, though the rest attends to them. KV memory is not
modelled: the engine preempts when it runs short, which is rare below its capacity,
and the capacity planner (planning/simulate.py, the same step costs) is where memory
is planned.

The work is bounded: it stops at horizon_s (a caller deciding against a target needs
no more), and each pass through the loop either admits a prompt, prefills a chunk or
lets a sequence leave.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, replace

from vigil.engine.request import Priority
from vigil.engine.stats import prefill_pairs_of
from vigil.platform.forecast.costs import StepCosts


@dataclass(frozen=True, slots=True)
class Waiting:
    """Admitted, with no first token yet: queued, or being prefilled."""

    priority: Priority
    num_prompt_tokens: int
    num_output_tokens: int  # expected
    num_cached_tokens: int = 0  # of the prompt, likely in the prefix cache (not computed)


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """One engine as the gateway sees it: its limits, and the requests it holds."""

    max_num_seqs: int
    max_num_batched_tokens: int
    running: tuple[int, ...] = ()  # per running sequence: output tokens still to come
    waiting: tuple[Waiting, ...] = ()  # in arrival order

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting


@dataclass(slots=True)
class _Prefill:
    index: int  # in the order the engine takes the waiting prompts
    num_left: int
    num_computed: int
    num_output_tokens: int


def first_token_s(
    costs: StepCosts,
    load: EngineLoad,
    priority: Priority,
    num_prompt_tokens: int,
    horizon_s: float = float("inf"),
    num_cached_tokens: int = 0,
) -> float:
    """Seconds from now to a new request's first token (horizon_s at most, roughly: the
    step that crosses it is counted whole)."""
    ahead = tuple(w for w in load.waiting if w.priority <= priority)
    new = Waiting(priority, num_prompt_tokens, 1, num_cached_tokens)
    times = first_tokens_s(costs, replace(load, waiting=(*ahead, new)), horizon_s)
    return times[-1] if times[-1] is not None else horizon_s


def first_tokens_s(
    costs: StepCosts,
    load: EngineLoad,
    horizon_s: float = float("inf"),
    in_progress_s: float | None = None,
) -> list[float | None]:
    """When each of load.waiting gets its first token, in seconds from now, in the order
    the engine takes them (interactive first, then batch; arrival order within each);
    None past horizon_s. in_progress_s: what is left of the step running now (None: a
    whole decode step of the running batch; none when nothing runs)."""
    order = sorted(load.waiting, key=lambda w: w.priority)
    queue = deque(_prefill(i, w) for i, w in enumerate(order))
    times: list[float | None] = [None] * len(order)
    step = 0  # steps taken
    leave_at = sorted(max(1, n) for n in load.running)  # a heap: the step of each last token
    prefilling: list[_Prefill] = []
    if in_progress_s is None:
        in_progress_s = costs.decode_s(len(leave_at)) if leave_at else 0.0
    t = in_progress_s
    while t < horizon_s and (queue or prefilling):
        free = load.max_num_seqs - len(leave_at) - len(prefilling)
        if not prefilling and free <= 0:
            n = leave_at[0] - step  # decode-only steps up to the next to leave
            t += n * costs.decode_s(len(leave_at))
            step += n
            _leave(leave_at, step)
            continue
        budget = load.max_num_batched_tokens - len(leave_at)  # a token each decode
        chunks: list[tuple[_Prefill, int]] = []
        for p in prefilling:
            if budget > 0:
                chunks.append((p, min(p.num_left, budget)))
                budget -= chunks[-1][1]
        while queue and budget > 0 and free > 0:
            p = queue.popleft()
            prefilling.append(p)
            free -= 1
            chunks.append((p, min(p.num_left, budget)))
            budget -= chunks[-1][1]
        num_seqs = len(leave_at) + len(chunks)
        num_tokens = len(leave_at) + sum(c for _, c in chunks)
        pairs = sum(prefill_pairs_of(p.num_computed, c) for p, c in chunks if c > 1)
        t += costs.step_s(num_seqs, num_tokens, pairs)
        step += 1
        _leave(leave_at, step)
        for p, chunk in chunks:
            p.num_left -= chunk
            p.num_computed += chunk
            if p.num_left == 0:
                times[p.index] = t
                prefilling.remove(p)
                if p.num_output_tokens > 1:  # its first token came with this step
                    heapq.heappush(leave_at, step + p.num_output_tokens - 1)
    return times


def _prefill(index: int, waiting: Waiting) -> _Prefill:
    """What is left to compute of a waiting prompt: its last token at least."""
    cached = min(waiting.num_cached_tokens, waiting.num_prompt_tokens - 1)
    left = max(1, waiting.num_prompt_tokens - cached)
    return _Prefill(index, left, max(0, cached), waiting.num_output_tokens)


def _leave(leave_at: list[int], step: int) -> None:
    while leave_at and leave_at[0] <= step:
        heapq.heappop(leave_at)
