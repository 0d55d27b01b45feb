"""Block pool bookkeeping: exact block ids, reference counts, back-pressure as None."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vigil.engine.kv_cache import (
    PARTIAL_CANDIDATES,
    BlockId,
    BlockPool,
    blocks_needed,
    hash_block,
)


def test_allocates_lowest_free_ids_first_and_counts_them() -> None:
    pool = BlockPool(4)
    assert pool.allocate(3) == [0, 1, 2]
    assert (pool.num_free, pool.num_used) == (1, 3)
    assert pool.allocate(1) == [3]
    assert (pool.num_free, pool.num_used) == (0, 4)


def test_freed_blocks_are_reused_after_the_never_used_ones() -> None:
    pool = BlockPool(4)
    first = pool.allocate(2)
    assert first == [0, 1]
    pool.free(first)
    assert pool.num_free == 4
    assert pool.allocate(4) == [2, 3, 0, 1]


def test_allocate_returns_none_and_takes_nothing_when_short() -> None:
    pool = BlockPool(4)
    pool.allocate(3)
    assert pool.allocate(2) is None
    assert pool.num_free == 1
    assert pool.allocate(1) == [3]  # the one free block was not taken by the failed call


def test_allocate_zero_blocks_is_an_empty_list() -> None:
    pool = BlockPool(2)
    assert pool.allocate(0) == []
    assert pool.num_free == 2


def test_freeing_a_block_twice_is_an_invariant_error() -> None:
    pool = BlockPool(2)
    blocks = pool.allocate(1)
    assert blocks is not None
    pool.free(blocks)
    with pytest.raises(AssertionError, match="freed twice"):
        pool.free(blocks)
    assert pool.num_free == 2  # the count never went negative


def test_freeing_a_block_never_allocated_is_an_invariant_error() -> None:
    pool = BlockPool(2)
    with pytest.raises(AssertionError):
        pool.free([1])  # type: ignore[list-item]


def test_a_pool_needs_at_least_one_block() -> None:
    with pytest.raises(AssertionError):
        BlockPool(0)


@pytest.mark.parametrize(
    ("num_tokens", "expected"), [(0, 0), (1, 1), (15, 1), (16, 1), (17, 2), (32, 2), (33, 3)]
)
def test_blocks_needed_rounds_up(num_tokens: int, expected: int) -> None:
    assert blocks_needed(num_tokens, 16) == expected


# ---- prefix cache -----------------------------------------------------------

H = [hash_block(None, [i], "m") for i in range(8)]  # distinct names for tests


def test_hash_chain_depends_on_parent_tokens_and_salt() -> None:
    a = hash_block(None, [1, 2, 3, 4], "model@1")
    assert a == hash_block(None, [1, 2, 3, 4], "model@1")
    assert a != hash_block(None, [1, 2, 3, 5], "model@1")
    assert a != hash_block(None, [1, 2, 3, 4], "model@2")
    assert hash_block(a, [5], "model@1") != hash_block(None, [5], "model@1")


def test_freed_cached_block_is_found_until_it_is_reused() -> None:
    pool = BlockPool(3)
    [b] = pool.allocate(1) or []
    pool.register(b, H[0])
    pool.free([b])
    assert pool.num_free == 3 and pool.num_cached == 1
    assert pool.lookup([H[0], H[1]]) == [b]  # leading run only
    pool.share([b])
    assert (pool.ref_count(b), pool.num_free) == (1, 2)
    pool.free([b])
    # allocating every block hands the cached one out last (it was freed last) and evicts it
    assert pool.allocate(3) == [1, 2, 0]
    assert pool.lookup([H[0]]) == [] and pool.num_cached == 0


def test_eviction_takes_the_least_recently_freed_cached_block() -> None:
    pool = BlockPool(4)
    blocks = pool.allocate(4) or []
    for block, name in zip(blocks, H, strict=False):
        pool.register(block, name)
    pool.free([blocks[2]])
    pool.free([blocks[0]])
    pool.free([blocks[3]])
    assert pool.allocate(1) == [blocks[2]]  # freed first, evicted first
    assert pool.lookup([H[2]]) == []
    assert pool.lookup([H[0]]) == [blocks[0]] and pool.lookup([H[3]]) == [blocks[3]]


def test_sharing_a_free_cached_block_takes_it_off_the_free_queue() -> None:
    pool = BlockPool(2)
    [a, b] = pool.allocate(2) or []
    pool.register(a, H[0])
    pool.free([a, b])
    pool.share(pool.lookup([H[0]]))
    assert pool.allocate(2) is None  # a is in use again
    assert pool.allocate(1) == [b]


def test_shared_block_needs_every_user_to_free_it() -> None:
    pool = BlockPool(1)
    [a] = pool.allocate(1) or []
    pool.register(a, H[0])
    pool.share([a])
    pool.free([a])
    assert pool.num_free == 0
    pool.free([a])
    assert pool.num_free == 1


def test_second_block_with_the_same_content_is_not_registered() -> None:
    pool = BlockPool(2)
    [a, b] = pool.allocate(2) or []
    pool.register(a, H[0])
    pool.register(b, H[0])  # computed at the same time by another sequence
    assert pool.lookup([H[0]]) == [a] and pool.num_cached == 1


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["alloc", "free", "hit"]), st.integers(0, 7)), max_size=60)
)
def test_pool_invariants_hold_under_any_sequence_of_operations(
    ops: list[tuple[str, int]],
) -> None:
    pool = BlockPool(6)
    held: list[list[int]] = []  # references held by fake sequences
    for op, arg in ops:
        if op == "alloc":
            blocks = pool.allocate(1 + arg % 3)
            if blocks is not None:
                for b in blocks:
                    pool.register(b, H[arg])  # may be refused: first name wins
                held.append(list(blocks))
        elif op == "free" and held:
            blocks = held.pop(arg % len(held))
            pool.free(blocks)
        elif op == "hit":
            hits = pool.lookup([H[arg]])
            pool.share(hits)
            held.append(list(hits))
        refs = [pool.ref_count(BlockId(b)) for b in range(6)]
        assert min(refs) >= 0
        in_use = sorted(b for blocks in held for b in blocks)
        assert sum(refs) == len(in_use)
        assert pool.num_free == sum(1 for r in refs if r == 0)
        for name in H:  # a cached name points at a block that is cached under it
            for b in pool.lookup([name]):
                assert pool._hash_of[b] == name
    for blocks in held:
        pool.free(blocks)
    assert pool.num_free == pool.num_blocks


def test_partial_hit_takes_the_longest_matching_start_after_the_same_parent() -> None:
    pool = BlockPool(8)
    a, b, c = pool.allocate(3)
    pool.register(a, H[0], H[5], [1, 2, 3, 4])
    pool.register(b, H[1], H[5], [1, 2, 9, 9])
    pool.register(c, H[2], H[6], [1, 2, 3, 4])  # the same tokens after another parent
    assert pool.partial_hit(H[5], [1, 2, 3, 7]) == (a, 3)
    assert pool.partial_hit(H[5], [1, 2, 9]) == (b, 3)
    assert pool.partial_hit(H[6], [1, 2, 9]) == (c, 2)
    assert pool.partial_hit(H[5], [2, 2]) is None and pool.partial_hit(H[7], [1]) is None
    assert pool.partial_hit(H[5], []) is None
    pool.free([a])
    pool.allocate(6)  # the five never used, then a: evicted, and gone from the index
    assert pool.partial_hit(H[5], [1, 2, 3]) == (b, 2)


def test_partial_hit_compares_a_bounded_number_of_the_most_recent_blocks() -> None:
    pool = BlockPool(PARTIAL_CANDIDATES + 2)
    best, *rest = pool.allocate(PARTIAL_CANDIDATES + 1)
    pool.register(best, H[0], H[5], [1, 2, 3])  # the best match, but the oldest
    for i, block in enumerate(rest):
        pool.register(block, hash_block(None, [100 + i], "m"), H[5], [1, 2])
    assert pool.partial_hit(H[5], [1, 2, 3]) == (rest[-1], 2)
