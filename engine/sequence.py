"""A request's state while the engine holds it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from vigil.engine.kv_cache import BlockHash, BlockId
from vigil.engine.request import GenerationRequest, Priority, RequestId, StepTimes


class SeqStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Sequence:
    request: GenerationRequest
    arrival_index: int  # FCFS order within a priority class
    output_ids: list[int] = field(default_factory=list)
    block_ids: list[BlockId] = field(default_factory=list)
    # Leading block_ids given back because they slid out of the window (scheduler.py).
    num_dropped_blocks: int = 0
    # Tokens whose K/V are in the cache. The last sampled token is never
    # computed yet: it is the next step's input.
    num_computed_tokens: int = 0
    status: SeqStatus = SeqStatus.WAITING
    # Prefix-cache names of this sequence's full blocks, in order, as far as known.
    block_hashes: list[BlockHash] = field(default_factory=list)
    # For its trace: prompt tokens the prefix cache had at its first admission, and the
    # steps its prompt was prefilled in (more than one when chunked or preempted).
    num_cached_prompt_tokens: int = 0
    num_prefill_chunks: int = 0
    # Its part of each step's time, and the rest of the batch's (request.py StepTimes).
    step_times: StepTimes = field(default_factory=StepTimes)
    # A later choice of a request: its choice 0, whose last prompt block (not full, so
    # not in the prefix cache) it may copy on its first admission (scheduler.py).
    fork_of: Sequence | None = None

    @property
    def request_id(self) -> RequestId:
        return self.request.request_id

    @property
    def priority(self) -> Priority:
        return self.request.priority

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.request.prompt_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.request.prompt_ids) + len(self.output_ids)

    def tokens(self, start: int, end: int) -> list[int]:
        prompt = self.request.prompt_ids
        if end <= len(prompt):
            return prompt[start:end]
        return (prompt + self.output_ids)[start:end]

    def token_at(self, position: int) -> int:
        prompt = self.request.prompt_ids
        return (
            prompt[position] if position < len(prompt) else self.output_ids[position - len(prompt)]
        )
