"""Which replica takes a request: a choice over a snapshot of candidate loads.

Power of two choices: sample two replicas at random and take the less loaded, which
keeps queues nearly as even as always picking the least loaded, without every
gateway herding onto the same one. Load is the replica's share of its batch slots in
use (the gateway's own count of requests it sent there and that have not ended, so a
burst is spread before the next heartbeat), plus its KV cache usage, plus its prefill
backlog: the prompt tokens sent there that have no first token yet, in seconds at the
replica's measured cost of a prompt token. A second of prefill queued ahead weighs as much as a
full batch, so on a slow device one long prompt steers short ones elsewhere, while on a
fast one counts decide.

Prefix affinity: a request whose prompt starts like a recent one (the same first
PREFIX_TOKENS tokens) goes where that one went, since the prefix is in that replica's
prefix cache, unless the replica is loaded AFFINITY_SLACK more than the least loaded
(then load wins, and the prefix moves with it). A prompt start not seen before goes by
load alone.
"""

from __future__ import annotations

import hashlib
import random
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

AFFINITY_SLACK = 0.25  # a quarter of the batch slots
PREFIX_MEMORY = 4096  # prompt starts remembered, least recently used forgotten first
PREFIX_MIN_TOKENS = 64  # shorter prompts are not worth keeping together
PREFIX_TOKENS = 256  # how much of the prompt names its prefix
UNMEASURED_PREFILL_TOKENS_PER_S = 2048.0  # for a replica that reports no step costs


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    replica: str
    in_flight: int  # requests the gateway sent there, not yet ended
    max_num_seqs: int
    kv_cache_usage: float  # 0-1, from the last heartbeat
    pending_prompt_tokens: int = 0  # sent there, no first token yet
    pending_prefill_s: float | None = None  # their cost there, from its step costs

    @property
    def score(self) -> float:
        prefill_s = self.pending_prefill_s
        if prefill_s is None:
            prefill_s = self.pending_prompt_tokens / UNMEASURED_PREFILL_TOKENS_PER_S
        return self.in_flight / max(1, self.max_num_seqs) + self.kv_cache_usage + prefill_s


def prefix_key(prompt_ids: Sequence[int]) -> bytes | None:
    if len(prompt_ids) < PREFIX_MIN_TOKENS:
        return None
    return hashlib.blake2b(array("q", prompt_ids[:PREFIX_TOKENS]).tobytes(), digest_size=8).digest()


def less_loaded_of_two(candidates: Sequence[ReplicaLoad], rng: random.Random) -> ReplicaLoad:
    assert candidates, "a choice needs at least one candidate"
    if len(candidates) == 1:
        return candidates[0]
    a, b = rng.sample(list(candidates), 2)
    return a if a.score <= b.score else b


class Router:
    """Power of two choices with prefix affinity per engine slot, or (`round_robin`,
    the baseline the routing benchmark compares with) each replica in turn, load
    unseen."""

    def __init__(self, rng: random.Random, round_robin: bool = False) -> None:
        self._rng = rng
        self._round_robin = round_robin
        self._turn: dict[str, int] = {}
        self._prefixes: OrderedDict[tuple[str, bytes], str] = OrderedDict()

    def choose(
        self, slot: str, candidates: Sequence[ReplicaLoad], prefix: bytes | None
    ) -> ReplicaLoad:
        assert candidates, "a choice needs at least one candidate"
        if self._round_robin:
            ordered = sorted(candidates, key=lambda c: c.replica)
            turn = self._turn.get(slot, 0)
            self._turn[slot] = turn + 1
            return ordered[turn % len(ordered)]
        if prefix is None:
            return less_loaded_of_two(candidates, self._rng)
        key = (slot, prefix)
        choice = less_loaded_of_two(candidates, self._rng)
        where = self._prefixes.get(key)
        least = min(c.score for c in candidates)
        for c in candidates:
            if c.replica == where and c.score <= least + AFFINITY_SLACK:
                choice = c
        self._prefixes[key] = choice.replica
        self._prefixes.move_to_end(key)
        if len(self._prefixes) > PREFIX_MEMORY:
            self._prefixes.popitem(last=False)
        return choice
