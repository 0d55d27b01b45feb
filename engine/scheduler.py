"""Continuous batching: which sequences run this step, and how many tokens each.

Every step, each running sequence feeds the tokens it has not computed yet: one
for a decoding sequence, a chunk of its prompt for one still prefilling. The
token budget left after that admits waiting prompts (interactive class first,
FCFS within a class), chunked when long. A finished sequence frees its slot and
blocks for the very next step.

When a running sequence needs a block and none is free, the lowest-priority,
most recently arrived running sequence is preempted: its blocks are freed and
it goes back to the head of its class's queue, to be recomputed later.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from vigil.engine.kv_cache import BlockPool, blocks_needed
from vigil.engine.request import Priority, RequestId
from vigil.engine.sequence import SeqStatus, Sequence


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int


@dataclass(slots=True)
class ScheduledSeq:
    seq: Sequence
    num_new_tokens: int  # tokens fed this step, starting at seq.num_computed_tokens

    @property
    def samples(self) -> bool:
        """True when this chunk reaches the end of the known tokens, so the step
        produces the sequence's next token."""
        return self.seq.num_computed_tokens + self.num_new_tokens == self.seq.num_tokens


@dataclass(slots=True)
class StepPlan:
    scheduled: list[ScheduledSeq] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


class Scheduler:
    def __init__(self, config: SchedulerConfig, pool: BlockPool) -> None:
        self.config = config
        self.pool = pool
        self.waiting: dict[Priority, deque[Sequence]] = {p: deque() for p in Priority}
        self.running: list[Sequence] = []  # in admission order
        self.num_preemptions = 0
        self._arrivals = 0

    def add(self, seq: Sequence) -> None:
        seq.arrival_index = self._arrivals
        self._arrivals += 1
        self.waiting[seq.priority].append(seq)

    @property
    def num_waiting(self) -> int:
        return sum(len(q) for q in self.waiting.values())

    def has_work(self) -> bool:
        return bool(self.running) or self.num_waiting > 0

    def find(self, request_id: RequestId) -> Sequence | None:
        for seq in self.running:
            if seq.request_id == request_id:
                return seq
        for queue in self.waiting.values():
            for seq in queue:
                if seq.request_id == request_id:
                    return seq
        return None

    def finish(self, seq: Sequence) -> None:
        """Take a sequence out of the engine and give its blocks back."""
        if seq.status is SeqStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SeqStatus.WAITING:
            self.waiting[seq.priority].remove(seq)
        self.pool.free(seq.block_ids)
        seq.block_ids = []
        seq.status = SeqStatus.FINISHED

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        budget = self.config.max_num_batched_tokens
        for seq in list(self.running):
            if seq.status is not SeqStatus.RUNNING:
                continue  # preempted earlier in this loop
            num_new = min(seq.num_tokens - seq.num_computed_tokens, budget)
            if num_new == 0:
                continue
            if not self._reserve(seq, num_new, plan):
                continue  # seq itself was preempted
            plan.scheduled.append(ScheduledSeq(seq, num_new))
            budget -= num_new
        if not plan.preempted:
            self._admit(plan, budget)
        return plan

    def _admit(self, plan: StepPlan, budget: int) -> None:
        for priority in Priority:
            queue = self.waiting[priority]
            while queue and budget > 0 and len(self.running) < self.config.max_num_seqs:
                seq = queue[0]
                num_new = min(seq.num_tokens - seq.num_computed_tokens, budget)
                need = blocks_needed(seq.num_computed_tokens + num_new, self.config.block_size)
                blocks = self.pool.allocate(need - len(seq.block_ids))
                if blocks is None:
                    return  # the head waits for memory; nothing behind it jumps the queue
                queue.popleft()
                seq.block_ids.extend(blocks)
                seq.status = SeqStatus.RUNNING
                self.running.append(seq)
                plan.scheduled.append(ScheduledSeq(seq, num_new))
                budget -= num_new

    def _reserve(self, seq: Sequence, num_new: int, plan: StepPlan) -> bool:
        """Blocks for seq's next num_new tokens, preempting others if needed.
        False when seq itself had to be preempted."""
        need = blocks_needed(seq.num_computed_tokens + num_new, self.config.block_size)
        while True:
            blocks = self.pool.allocate(need - len(seq.block_ids))
            if blocks is not None:
                seq.block_ids.extend(blocks)
                return True
            victim = self._choose_victim(plan)
            self._preempt(victim, plan)
            if victim is seq:
                return False

    def _choose_victim(self, plan: StepPlan) -> Sequence:
        # Lowest priority first (highest enum value), then the newest arrival.
        victim = max(self.running, key=lambda s: (s.priority, s.arrival_index))
        return victim

    def _preempt(self, seq: Sequence, plan: StepPlan) -> None:
        self.running.remove(seq)
        plan.scheduled = [s for s in plan.scheduled if s.seq is not seq]
        self.pool.free(seq.block_ids)
        seq.block_ids = []
        seq.num_computed_tokens = 0
        seq.status = SeqStatus.WAITING
        self.waiting[seq.priority].appendleft(seq)
        plan.preempted.append(seq)
        self.num_preemptions += 1

    def update(self, plan: StepPlan, sampled: dict[RequestId, int]) -> None:
        """Advance each scheduled sequence past the tokens it computed this step
        and append the token it sampled, if any."""
        for item in plan.scheduled:
            seq = item.seq
            seq.num_computed_tokens += item.num_new_tokens
            token = sampled.get(seq.request_id)
            if token is not None:
                seq.output_ids.append(token)
