"""Which replica takes a request: a pure choice over a snapshot of candidate loads.

Power of two choices: sample two replicas at random and take the less loaded, which
keeps queues nearly as even as always picking the least loaded, without every
gateway herding onto the same one. Load is the replica's share of its batch slots in
use (the gateway's own count of requests it sent there and that have not ended, so a
burst is spread before the next heartbeat) plus its KV cache usage.

Prefix affinity: requests that share a long prompt prefix prefer one replica (the
highest rendezvous hash of the prefix and the replica), where that prefix is already
in the prefix cache, unless it is loaded `AFFINITY_SLACK` more than the least loaded.
"""

from __future__ import annotations

import hashlib
import random
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

AFFINITY_SLACK = 0.5
PREFIX_MIN_TOKENS = 64  # shorter prompts are not worth keeping together
PREFIX_TOKENS = 256  # how much of the prompt names its prefix


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    replica: str
    in_flight: int  # requests the gateway sent there, not yet ended
    max_num_seqs: int
    kv_cache_usage: float  # 0-1, from the last heartbeat

    @property
    def score(self) -> float:
        return self.in_flight / max(1, self.max_num_seqs) + self.kv_cache_usage


def prefix_key(prompt_ids: Sequence[int]) -> bytes | None:
    if len(prompt_ids) < PREFIX_MIN_TOKENS:
        return None
    return hashlib.blake2b(array("q", prompt_ids[:PREFIX_TOKENS]).tobytes(), digest_size=8).digest()


def choose_replica(
    candidates: Sequence[ReplicaLoad], prefix: bytes | None, rng: random.Random
) -> ReplicaLoad:
    assert candidates, "choose_replica needs at least one candidate"
    if len(candidates) == 1:
        return candidates[0]
    if prefix is not None:
        preferred = max(candidates, key=lambda c: _rendezvous(prefix, c.replica))
        if preferred.score <= min(c.score for c in candidates) + AFFINITY_SLACK:
            return preferred
    a, b = rng.sample(list(candidates), 2)
    return a if a.score <= b.score else b


def _rendezvous(prefix: bytes, replica: str) -> int:
    return int.from_bytes(hashlib.blake2b(prefix + replica.encode(), digest_size=8).digest())
