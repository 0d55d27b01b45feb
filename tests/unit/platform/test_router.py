"""Replica choice: power of two choices by load, prefix affinity while the replica
that has the prefix is not overloaded, and the round-robin baseline."""

from __future__ import annotations

import random
from collections import Counter

from vigil.platform.gateway.router import (
    AFFINITY_SLACK,
    PREFIX_MEMORY,
    PREFIX_MIN_TOKENS,
    ReplicaLoad,
    Router,
    prefix_key,
)

SLOTS = 20  # max_num_seqs of every test replica


def load(name: str, in_flight: int = 0, kv: float = 0.0) -> ReplicaLoad:
    return ReplicaLoad(name, in_flight, max_num_seqs=SLOTS, kv_cache_usage=kv)


def test_score_adds_slot_share_and_kv_usage() -> None:
    assert load("a", in_flight=5, kv=0.25).score == 0.5


def test_a_queued_long_prompt_outweighs_a_few_running_requests() -> None:
    # One 1,500-token prompt still to prefill at 1 ms a token: 1.5 s of backlog, more
    # than a full batch; two running short requests are a tenth of one.
    prefilling = ReplicaLoad("a", 1, SLOTS, 0.0, pending_prompt_tokens=1500, pending_prefill_s=1.5)
    decoding = ReplicaLoad("b", 2, SLOTS, 0.0, pending_prefill_s=0.0)
    assert prefilling.score == 1 / SLOTS + 1.5
    router = Router(random.Random(5))
    assert router.choose("v", [prefilling, decoding], None).replica == "b"
    # On a device that prefills 100x faster the same prompt is a blip: counts decide.
    fast = ReplicaLoad("a", 1, SLOTS, 0.0, pending_prompt_tokens=1500, pending_prefill_s=0.015)
    assert router.choose("v", [fast, decoding], None).replica == "a"
    # A replica that reports no step costs is taken to prefill 2,048 tokens a second.
    unmeasured = ReplicaLoad("a", 1, SLOTS, 0.0, pending_prompt_tokens=2048)
    assert unmeasured.score == 1 / SLOTS + 1.0


def test_two_replicas_always_gives_the_less_loaded() -> None:
    router = Router(random.Random(0))
    candidates = [load("a", 6), load("b", 2, kv=0.1)]
    assert {router.choose("v", candidates, None).replica for _ in range(50)} == {"b"}


def test_power_of_two_never_picks_the_most_loaded_of_many() -> None:
    router = Router(random.Random(1))
    candidates = [load("a", 1), load("b", 2), load("c", 3), load("d", 9)]
    picks = Counter(router.choose("v", candidates, None).replica for _ in range(600))
    assert "d" not in picks
    assert picks["a"] > picks["b"] > picks["c"] > 0  # the least loaded most often


def test_prefix_key_needs_a_long_enough_prompt_and_names_its_start() -> None:
    long = list(range(PREFIX_MIN_TOKENS + 300))
    assert prefix_key(long[: PREFIX_MIN_TOKENS - 1]) is None
    assert prefix_key(long) == prefix_key([*long[:256], 7, 7, 7])  # same first 256 tokens
    assert prefix_key(long) != prefix_key([1, *long])


def test_a_new_prefix_goes_by_load_and_later_ones_follow_it() -> None:
    router = Router(random.Random(2))
    prefix = prefix_key(list(range(300)))
    first = router.choose("v", [load("a", 3), load("b", 1)], prefix)
    assert first.replica == "b"  # not seen before: the less loaded
    # Now "b" is a little busier, but it has the prefix cached.
    busier = [load("a", 1), load("b", 1 + int(AFFINITY_SLACK * SLOTS))]
    assert {router.choose("v", busier, prefix).replica for _ in range(20)} == {"b"}
    # Over the slack, load wins and the prefix moves with the request.
    over = [load("a", 1), load("b", 2 + int(AFFINITY_SLACK * SLOTS))]
    assert router.choose("v", over, prefix).replica == "a"
    assert router.choose("v", [load("a", 3), load("b", 1)], prefix).replica == "a"
    # The same prompt start on another engine slot is a different prefix.
    assert router.choose("w", [load("a", 3), load("b", 1)], prefix).replica == "b"


def test_prefix_memory_is_bounded() -> None:
    router = Router(random.Random(3))
    first = prefix_key(list(range(300)))
    router.choose("v", [load("a", 0), load("b", 5)], first)  # remembered on "a"
    for i in range(PREFIX_MEMORY):
        router.choose("v", [load("a", 0)], prefix_key([i + 1000] * 100))
    # Forgotten: goes by load again.
    assert router.choose("v", [load("a", 5), load("b", 0)], first).replica == "b"


def test_round_robin_takes_each_replica_in_turn_per_slot_whatever_the_load() -> None:
    router = Router(random.Random(4), round_robin=True)
    candidates = [load("b", 9), load("a", 0)]
    assert [router.choose("v1", candidates, None).replica for _ in range(4)] == ["a", "b", "a", "b"]
    assert router.choose("v2", candidates, None).replica == "a"  # its own turn per engine slot
